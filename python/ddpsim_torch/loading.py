"""Finding the user's code: MODULE:FUNC (an importable module) or
path/to/file.py:FUNC, as --wrap, --model, --data and --loss name it."""
import importlib
import importlib.util
import os
import sys


class BadInput(Exception):
    """Input the check cannot run on (exit 2): the message says what is wrong and what to do."""


class Unsupported(BadInput):
    """The wrapper lacks what one scenario needs (join() for join{...}): that scenario is not run, the reason
    said; alone, it is bad input (exit 2)."""


def describe(obj):
    """MODULE:QUALNAME of a callable defined at a module's top level (what a rank process can import), or None."""
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not mod or not qual or "<locals>" in qual or "<lambda>" in qual:
        return None
    if mod == "__main__":
        path = getattr(sys.modules.get("__main__"), "__file__", None)
        return "%s:%s" % (os.path.abspath(path), qual) if path else None
    return "%s:%s" % (mod, qual)


def _module_from_file(path):
    name = "ddpsim_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    if name in sys.modules:
        return sys.modules[name]
    here = os.path.dirname(os.path.abspath(path))
    if here not in sys.path:  # its own imports of the modules beside it work, as when Python runs the file
        sys.path.append(here)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise BadInput("%s: not a Python file that can be loaded" % path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load(spec, what):
    """The object spec names (MODULE:FUNC or file.py:FUNC); BadInput naming `what` (--wrap, ...) otherwise."""
    if ":" not in spec:
        raise BadInput("%s %s: expected MODULE:FUNC or path/to/file.py:FUNC" % (what, spec))
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise BadInput("%s %s: expected MODULE:FUNC or path/to/file.py:FUNC" % (what, spec))
    try:
        if where.endswith(".py") or os.sep in where:
            if not os.path.isfile(where):
                raise BadInput("%s %s: no file %s" % (what, spec, where))
            module = _module_from_file(os.path.abspath(where))
        else:
            module = importlib.import_module(where)
    except BadInput:
        raise
    except Exception as e:  # the user's module failing to import is bad input, said in its own words
        raise BadInput("%s %s: cannot import %s: %s: %s" % (what, spec, where, type(e).__name__, e)) from e
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise BadInput("%s %s: %s has no attribute %s" % (what, spec, where, attr))
        obj = getattr(obj, part)
    if not callable(obj):
        raise BadInput("%s %s: %s is a %s, not callable" % (what, spec, attr, type(obj).__name__))
    return obj


def as_spec(obj, what):
    """A spec string for obj: kept if a string, else where a rank process can import it from."""
    if obj is None or isinstance(obj, str):
        return obj
    if not callable(obj):
        raise BadInput("%s: a %s is not callable" % (what, type(obj).__name__))
    spec = describe(obj)
    if spec is None:
        raise BadInput("%s: %r is not defined at a module's top level, so the rank processes cannot import it; "
                       "define it at the top of a module (or pass 'MODULE:FUNC')" % (what, obj))
    return spec
