"""python3 -m ddpsim_torch ARGS without starting an interpreter and importing torch each time: a test harness.

  front_server.py serve SOCKET        imports torch and the front end once, then runs each request in a child
  front_server.py run SOCKET ARGS...  one request: ddpsim_torch's main(ARGS) in a fork of the server, with this
                                      process's stdout, stderr, working directory and environment; exits with
                                      its exit status

tests/python.sh's semantic checks (not the ones that watch processes and signals: those run the command line
itself) are a hundred short front-end runs; each spent about 3 s of CPU importing torch and, under torch 2.x,
torch._dynamo before its ranks ran (a fifth of a second under 1.13's), most of the suite's time on CI's two cores.
A fork of a process that has imported them and run no torch op is what the command line forks its ranks from
anyway (ddpsim_torch/launch.py), so the ranks start as they would. What a fork cannot give is refused, not
approximated: an environment variable read when torch or OpenBLAS is imported (OPENBLAS_*, OMP_*, MKL_*,
TORCH_*, CUDA_*, PYTHON*) that differs from the server's is exit 125 with its name (run the command line for it).
"""
import os
import socket
import struct
import sys

IMPORT_TIME_VARS = ("OPENBLAS_", "OMP_", "MKL_", "TORCH_", "CUDA_", "PYTHON", "LD_")
NOT_RUN = 125  # the request was not run: the client says why


def _send_msg(sock, data):
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _recv_msg(sock):
    (n,) = struct.unpack("!I", _recv_exact(sock, 4))
    return _recv_exact(sock, n)


def _encode(items):
    return b"\0".join(s.encode("utf-8", "surrogateescape") for s in items)


def _decode(data):
    return [s.decode("utf-8", "surrogateescape") for s in data.split(b"\0")] if data else []


def _mismatched_import_vars(env):
    names = set(env) | set(os.environ)
    return sorted(n for n in names if n.startswith(IMPORT_TIME_VARS) and env.get(n) != os.environ.get(n))


def _child(server, conn, fds, cwd, env, argv, main):
    """In the fork: this request's stdio, directory and environment, then the command line's main."""
    server.close()
    conn.close()
    for fd, target in zip(fds, (1, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[0] = cwd  # python3 -m puts the working directory first
    code = 1
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            sys.stderr.write("%s\n" % e.code)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)


def serve(path):
    import ctypes
    import signal
    # Ends with the test script that started it, however that ends (PR_SET_PDEATHSIG); the script's own end
    # sends SIGTERM.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    import torch  # noqa: F401  (what every request would import)
    import ddpsim_torch.__main__ as front
    from ddpsim_torch import launch
    launch._preload()  # torch._dynamo under torch 2.x, as the command line does before forking its ranks
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    sys.stdout.write("front_server: ready, torch %s\n" % torch.__version__)
    sys.stdout.flush()
    while True:
        conn, _ = server.accept()
        fds = []
        try:
            _, fds, _, _ = socket.recv_fds(conn, 1, 2)  # the client's stdout and stderr, then its request
            cwd, env_blob, argv_blob = _recv_msg(conn).split(b"\1")
            env = dict(kv.split("=", 1) for kv in _decode(env_blob))
            argv = _decode(argv_blob)
            bad = _mismatched_import_vars(env)
            if bad:
                _send_msg(conn, b"%d refused: read when torch is imported, and not the server's: %s" % (
                    NOT_RUN, ", ".join(bad).encode()))
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(server, conn, fds, cwd.decode("utf-8", "surrogateescape"), env, argv, front.main)
            _, status = os.waitpid(pid, 0)
            if os.WIFEXITED(status):
                _send_msg(conn, b"%d" % os.WEXITSTATUS(status))
            else:
                _send_msg(conn, b"%d killed by signal %d" % (128 + os.WTERMSIG(status), os.WTERMSIG(status)))
        except (EOFError, OSError, ValueError) as e:
            sys.stderr.write("front_server: a bad request: %s\n" % e)
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()


def run(path, argv):
    env = ["%s=%s" % kv for kv in os.environ.items()]
    payload = b"\1".join((os.getcwd().encode("utf-8", "surrogateescape"), _encode(env), _encode(argv)))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        socket.send_fds(sock, [b"\0"], [1, 2])
        _send_msg(sock, payload)
        reply = _recv_msg(sock).decode()
    except (OSError, EOFError) as e:
        sys.stderr.write("front_server.py run: no answer from the server at %s: %s\n" % (path, e))
        return NOT_RUN
    code, _, why = reply.partition(" ")
    if why:
        sys.stderr.write("front_server.py run: %s\n" % why)
    return int(code)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2], sys.argv[3:]))
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)
