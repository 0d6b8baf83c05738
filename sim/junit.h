/*
 * junit.h - --junit FILE: a run's verdicts as JUnit XML, in the layout
 * pytest writes with junit_family=xunit2 and CI systems read (Jenkins,
 * GitLab, GitHub test reporters): <testsuites> holding one <testsuite> per
 * run, a <testcase> per scenario of the battery or per check of a single
 * run, a <failure> with the first divergence, the replay line in
 * <system-out>. That layout (Maven Surefire's junit-10.xsd, which pytest's
 * own tests validate against: pytest testing/example_scripts/junit-10.xsd)
 * has no <properties> inside a <testcase> and no <error> element, so a
 * testcase's facts are "key: value" lines of its failure's text, the
 * suite's <properties> carry the first failure's, and a fault is a failure
 * of type "fault". tests/junit/xunit2.xsd is ddpsim's statement of that
 * layout; tests/junit.sh validates every document against it.
 */
#ifndef DDPSIM_JUNIT_H
#define DDPSIM_JUNIT_H

#include <stdio.h>

#include "judge.h"

typedef enum junit_outcome { JUNIT_PASS, JUNIT_FAIL, JUNIT_FAULT, JUNIT_SKIP } junit_outcome;

typedef struct junit_case {
    const char *name;
    double time_s;            /* < 0: not measured (no time attribute) */
    junit_outcome outcome;
    const char *type;         /* the failure's kind ("divergence", "reference", "fault"), or NULL */
    const char *message;      /* the failure's or skip's one line */
    const judge_facts *facts; /* the failure's fields, or NULL */
    const char *replay;       /* the command that reruns it: system-out */
} junit_case;

/* The testcases of one suite, written to a temporary file as they come (a run of a million checks holds none). */
typedef struct junit_suite {
    FILE *cases;
    int tests, failures, skipped;
    int has_first;            /* the first failing testcase's name and facts: the suite's properties */
    char first_name[128];
    judge_facts first;
} junit_suite;

/* -1 (msg says why) when the temporary file cannot be made. */
int junit_begin(junit_suite *s, char *msg, size_t len);
void junit_add(junit_suite *s, const junit_case *c);
/*
 * The document to out: the suite named name, its wall time, the properties
 * (name/value pairs, NULL-terminated) and the first failure's facts, then
 * the testcases. -1 on a write error (errno set).
 */
int junit_write(junit_suite *s, FILE *out, const char *name, double wall_s, const char *const *props);
void junit_end(junit_suite *s);

#endif
