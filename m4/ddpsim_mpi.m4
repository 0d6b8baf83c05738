# ddpsim_mpi.m4 - three-way detection of MPI for --world mpi.
#
# DDPSIM_CHECK_MPI: --with-mpi[=MPICC] / --without-mpi / nothing (auto).
#   Asks pkg-config for ompi-c first, then the MPI compiler wrapper
#   (mpicc, or the one given) for its flags (--showme:compile and
#   --showme:link, Open MPI's; -compile_info/-link_info, MPICH's), and
#   checks that a program calling MPI_Ialltoallv (MPI-3's non-blocking
#   collectives, which the MPI world's supervisor waits on) links with
#   them. Sets MPI_CPPFLAGS, MPI_LIBS, ddpsim_have_mpi (yes/no),
#   ddpsim_mpi_where and ddpsim_mpi_why. Fails only when --with-mpi was
#   given and no usable MPI was found.

AC_DEFUN([DDPSIM_CHECK_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi@<:@=MPICC@:>@],
      [MPI for --world mpi (default: auto-detect through pkg-config ompi-c or mpicc)])],
    [], [with_mpi=check])
  ddpsim_have_mpi=no
  ddpsim_mpi_why=
  MPI_CPPFLAGS= ; MPI_LIBS=
  AS_IF([test "x$with_mpi" != xno], [
    AC_MSG_CHECKING([for MPI])
    ddpsim_mpi_cpp= ; ddpsim_mpi_libs= ; ddpsim_mpi_where=
    AS_CASE([$with_mpi], [yes|check], [ddpsim_mpicc=mpicc], [ddpsim_mpicc=$with_mpi])
    AS_IF([test "x$ddpsim_mpicc" = xmpicc && test -n "$PKG_CONFIG" && $PKG_CONFIG --exists ompi-c 2>/dev/null], [
      ddpsim_mpi_cpp=`$PKG_CONFIG --cflags ompi-c`
      ddpsim_mpi_libs=`$PKG_CONFIG --libs ompi-c`
      ddpsim_mpi_where="pkg-config ompi-c `$PKG_CONFIG --modversion ompi-c`"
    ], [AS_IF([command -v "$ddpsim_mpicc" >/dev/null 2>&1], [
      AS_IF([ddpsim_mpi_cpp=`$ddpsim_mpicc --showme:compile 2>/dev/null`], [
        ddpsim_mpi_libs=`$ddpsim_mpicc --showme:link 2>/dev/null`
      ], [
        ddpsim_mpi_cpp=`$ddpsim_mpicc -compile_info 2>/dev/null | cut -d' ' -f2- | tr ' ' '\n' | grep '^-I' | tr '\n' ' '`
        ddpsim_mpi_libs=`$ddpsim_mpicc -link_info 2>/dev/null | cut -d' ' -f2- | tr ' ' '\n' | grep '^-[[lLW]]' | tr '\n' ' '`
      ])
      ddpsim_mpi_where=`command -v $ddpsim_mpicc`
    ], [ddpsim_mpi_why="no pkg-config ompi-c and no $ddpsim_mpicc"])])
    AS_IF([test -n "$ddpsim_mpi_where"], [
      ddpsim_save_CPPFLAGS=$CPPFLAGS
      ddpsim_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $ddpsim_mpi_cpp"
      LIBS="$ddpsim_mpi_libs $LIBS"
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
          [[MPI_Request r; MPI_Ialltoallv(0, 0, 0, MPI_BYTE, 0, 0, 0, MPI_BYTE, MPI_COMM_WORLD, &r);]])],
        [ddpsim_have_mpi=yes], [ddpsim_mpi_why="$ddpsim_mpi_where does not link a program with MPI_Ialltoallv"])
      CPPFLAGS=$ddpsim_save_CPPFLAGS
      LIBS=$ddpsim_save_LIBS
    ])
    AS_IF([test "x$ddpsim_have_mpi" = xyes], [
      MPI_CPPFLAGS=$ddpsim_mpi_cpp
      MPI_LIBS=$ddpsim_mpi_libs
      AC_MSG_RESULT([yes ($ddpsim_mpi_where)])
    ], [
      AC_MSG_RESULT([no ($ddpsim_mpi_why)])
      AS_IF([test "x$with_mpi" != xcheck],
        [AC_MSG_ERROR([--with-mpi was given but no usable MPI was found: $ddpsim_mpi_why (Debian: apt-get install openmpi-bin libopenmpi-dev)])])
    ])
  ])
  AC_SUBST([MPI_CPPFLAGS])
  AC_SUBST([MPI_LIBS])
])
