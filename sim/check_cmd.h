/*
 * check_cmd.h - `ddpsim check DIR`: the reference DDP replayed on a
 * recorded run (engine/verify/check.h), reported as a live run is.
 */
#ifndef DDPSIM_CHECK_CMD_H
#define DDPSIM_CHECK_CMD_H

/* The subcommand's main (argv[0] is "check"); returns the exit code. */
int check_main(int argc, char **argv);

#endif
