/*
 * mutants.h - `ddpsim --mutants`: run every catalogued bug through the
 * checker and report which were caught, by which configuration, where.
 */
#ifndef DDPSIM_MUTANTS_H
#define DDPSIM_MUTANTS_H

#include "options.h"

/* Returns 0 when every mutant is caught and every correct implementation passes, 1 otherwise. */
int mutants_main(const ddpsim_options *opt);

#endif
