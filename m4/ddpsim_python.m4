# ddpsim_python.m4 - the Python front end (python/ddpsim_torch): installed
# with automake's Python support when a Python 3 is found. An interpreter
# that imports torch is preferred (Debian's python3-torch is for
# /usr/bin/python3, and the first python3 on PATH may be another one), so
# that `make install` puts the package where that Python looks.
#
# DDPSIM_CHECK_PYTHON: sets PYTHON (or ':'), the HAVE_PYTHON conditional and
# ddpsim_python_line for the summary.
AC_DEFUN([DDPSIM_CHECK_PYTHON], [
  AS_IF([test -z "$PYTHON"], [
    AC_MSG_CHECKING([for a Python 3 with torch])
    for ddpsim_py in python3 /usr/bin/python3; do
      AS_IF([$ddpsim_py -c 'import torch, numpy' >/dev/null 2>&1], [PYTHON=$ddpsim_py; break])
    done
    AS_IF([test -n "$PYTHON"], [AC_MSG_RESULT([$PYTHON])], [AC_MSG_RESULT([no])])
  ])
  AM_PATH_PYTHON([3.7], [], [:])
  dnl Debian's Python reads <prefix>/lib/python3.X/dist-packages, not the site-packages automake names.
  AS_IF([test "x$PYTHON" != x: &&
         $PYTHON -c 'import sys; sys.exit(not any(p.endswith("/dist-packages") for p in sys.path))' 2>/dev/null],
    [pythondir='${PYTHON_PREFIX}/lib/python'"$PYTHON_VERSION"'/dist-packages'])
  AM_CONDITIONAL([HAVE_PYTHON], [test "x$PYTHON" != x:])
  AS_IF([test "x$PYTHON" = x:], [ddpsim_python_line="no (the Python front end is not installed)"],
    [$PYTHON -c 'import torch, numpy' >/dev/null 2>&1],
      [ddpsim_python_line="$PYTHON, with torch (python3 -m ddpsim_torch installed in $pythondir)"],
    [ddpsim_python_line="$PYTHON, without torch (installed in $pythondir; its tests skip: apt-get install python3-torch)"])
])
