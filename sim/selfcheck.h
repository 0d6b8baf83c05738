/*
 * selfcheck.h - `ddpsim selfcheck`: the collectives self-check. Every
 * algorithm, type and op is allreduced over the ranks on inputs whose sums
 * are exact, and every element and every rank's bits are checked.
 */
#ifndef DDPSIM_SELFCHECK_H
#define DDPSIM_SELFCHECK_H

/* argv[0] is "selfcheck". Returns the process exit code. */
int selfcheck_main(int argc, char **argv);

#endif
