# ddpsim_gpu.m4 - three-way detection of the CUDA toolkit and NCCL.
#
# DDPSIM_CHECK_CUDA: --with-cuda[=DIR] / --without-cuda / nothing (auto).
#   Looks for DIR/include/cuda_runtime.h and libcudart in DIR/lib64 or
#   DIR/lib (DIR defaults to /usr/local/cuda, then the system paths).
#   Sets CUDA_CPPFLAGS, CUDA_LDFLAGS, CUDA_LIBS, ddpsim_have_cuda (yes/no)
#   and ddpsim_cuda_where. Fails only when --with-cuda was given and no
#   usable CUDA was found.
# DDPSIM_CHECK_NCCL: the same for nccl.h and libnccl, looking in DIR, then
#   the CUDA directory, then the system paths. Needs CUDA, and NCCL 2.14 or
#   later: the backend creates non-blocking communicators
#   (ncclCommInitRankConfig, ncclConfig_t) and finalizes them
#   (ncclCommFinalize), both new in 2.14. An older NCCL is reported as such
#   and not used.

# _DDPSIM_TRY_LIB(HEADER, LIB, BODY, CPPFLAGS, LDFLAGS, [IF-FOUND], [IF-NOT])
AC_DEFUN([_DDPSIM_TRY_LIB], [
  ddpsim_save_CPPFLAGS=$CPPFLAGS
  ddpsim_save_LDFLAGS=$LDFLAGS
  ddpsim_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $4"
  LDFLAGS="$LDFLAGS $5"
  LIBS="-l$2 $LIBS"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <$1>]], [$3])], [$6], [$7])
  CPPFLAGS=$ddpsim_save_CPPFLAGS
  LDFLAGS=$ddpsim_save_LDFLAGS
  LIBS=$ddpsim_save_LIBS
])

# _DDPSIM_SEARCH(HEADER, LIB, BODY, DIRS, PREFIX) - first DIR that works; "system" means no -I/-L.
AC_DEFUN([_DDPSIM_SEARCH], [
  $5_found=no
  for ddpsim_dir in $4; do
    if test "x$ddpsim_dir" = xsystem; then
      ddpsim_cpp= ; ddpsim_ld=
    else
      test -d "$ddpsim_dir" || continue
      ddpsim_libdir="$ddpsim_dir/lib64"
      test -d "$ddpsim_libdir" || ddpsim_libdir="$ddpsim_dir/lib"
      ddpsim_cpp="-isystem $ddpsim_dir/include"
      ddpsim_ld="-L$ddpsim_libdir -Wl,-rpath,$ddpsim_libdir"
    fi
    _DDPSIM_TRY_LIB([$1], [$2], [$3], [$ddpsim_cpp $CUDA_CPPFLAGS], [$ddpsim_ld $CUDA_LDFLAGS],
      [$5_found=yes; $5_CPPFLAGS=$ddpsim_cpp; $5_LDFLAGS=$ddpsim_ld; $5_where=$ddpsim_dir])
    test "x$$5_found" = xyes && break
  done
])

AC_DEFUN([DDPSIM_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
      [CUDA toolkit for the NCCL backend (default: auto-detect in /usr/local/cuda and the system paths)])],
    [], [with_cuda=check])
  ddpsim_have_cuda=no
  CUDA_CPPFLAGS= ; CUDA_LDFLAGS= ; CUDA_LIBS=
  AS_IF([test "x$with_cuda" != xno], [
    AS_CASE([$with_cuda],
      [yes|check], [ddpsim_cuda_dirs="/usr/local/cuda system"],
      [ddpsim_cuda_dirs="$with_cuda"])
    AC_MSG_CHECKING([for the CUDA runtime])
    _DDPSIM_SEARCH([cuda_runtime.h], [cudart], [[(void)cudaGetDeviceCount;]], [$ddpsim_cuda_dirs], [ddpsim_cuda])
    AS_IF([test "x$ddpsim_cuda_found" = xyes], [
      ddpsim_have_cuda=yes
      CUDA_CPPFLAGS=$ddpsim_cuda_CPPFLAGS
      CUDA_LDFLAGS=$ddpsim_cuda_LDFLAGS
      CUDA_LIBS=-lcudart
      AC_MSG_RESULT([yes ($ddpsim_cuda_where)])
    ], [
      AC_MSG_RESULT([no])
      AS_IF([test "x$with_cuda" != xcheck],
        [AC_MSG_ERROR([--with-cuda was given but no usable CUDA runtime (cuda_runtime.h, libcudart) was found in $ddpsim_cuda_dirs])])
    ])
  ])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_LIBS])
])

AC_DEFUN([DDPSIM_CHECK_NCCL], [
  AC_REQUIRE([DDPSIM_CHECK_CUDA])
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl@<:@=DIR@:>@],
      [NCCL for the GPU backend (default: auto-detect in the CUDA directory and the system paths)])],
    [], [with_nccl=check])
  ddpsim_have_nccl=no
  ddpsim_nccl_why=
  NCCL_CPPFLAGS= ; NCCL_LDFLAGS= ; NCCL_LIBS=
  AS_IF([test "x$with_nccl" != xno], [
    AS_IF([test "x$ddpsim_have_cuda" != xyes], [
      AS_IF([test "x$with_nccl" != xcheck],
        [AC_MSG_ERROR([--with-nccl needs CUDA, and no usable CUDA runtime was found (see --with-cuda)])])
    ], [
      AS_CASE([$with_nccl],
        [yes|check], [ddpsim_nccl_dirs="$ddpsim_cuda_where system"],
        [ddpsim_nccl_dirs="$with_nccl"])
      AC_MSG_CHECKING([for NCCL 2.14 or later])
      _DDPSIM_SEARCH([nccl.h], [nccl], [[
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        (void)config;
        (void)ncclGetVersion; (void)ncclGetUniqueId; (void)ncclCommInitRankConfig; (void)ncclCommFinalize;
        (void)ncclCommAbort; (void)ncclCommDestroy; (void)ncclCommGetAsyncError; (void)ncclAllReduce;
        (void)ncclGetErrorString; (void)ncclGetLastError;]], [$ddpsim_nccl_dirs], [ddpsim_nccl])
      AS_IF([test "x$ddpsim_nccl_found" = xyes], [
        ddpsim_have_nccl=yes
        NCCL_CPPFLAGS=$ddpsim_nccl_CPPFLAGS
        NCCL_LDFLAGS=$ddpsim_nccl_LDFLAGS
        NCCL_LIBS=-lnccl
        AC_MSG_RESULT([yes ($ddpsim_nccl_where)])
      ], [
        _DDPSIM_SEARCH([nccl.h], [nccl], [[(void)ncclGetVersion;]], [$ddpsim_nccl_dirs], [ddpsim_nccl_old])
        AS_IF([test "x$ddpsim_nccl_old_found" = xyes],
          [ddpsim_nccl_why="NCCL in $ddpsim_nccl_old_where is older than 2.14 (no ncclCommInitRankConfig/ncclCommFinalize)"],
          [ddpsim_nccl_why="no nccl.h and libnccl in $ddpsim_nccl_dirs"])
        AC_MSG_RESULT([no: $ddpsim_nccl_why])
        AS_IF([test "x$with_nccl" != xcheck],
          [AC_MSG_ERROR([--with-nccl was given but no usable NCCL was found: $ddpsim_nccl_why])])
      ])
    ])
  ])
  AC_SUBST([NCCL_CPPFLAGS])
  AC_SUBST([NCCL_LDFLAGS])
  AC_SUBST([NCCL_LIBS])
])
