/*
 * replay_main.c - a main() for the fuzz harnesses without libFuzzer: feeds
 * every file named on the command line (or found in named directories) to
 * LLVMFuzzerTestOneInput once. make check runs the corpus and every saved
 * crash (tests/fuzz/regressions) through it, with gcc, so a fixed crash stays
 * fixed. Prints "N passed, 0 failed"; a crash fails the test by itself.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int feed(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "cannot stat %s\n", path);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d)
            return -1;
        struct dirent *e;
        int rc = 0;
        while (rc == 0 && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rc = feed(sub, count);
        }
        closedir(d);
        return rc;
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!buf)
        return -1;
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    (*count)++;
    return 0;
}

int main(int argc, char **argv)
{
    int count = 0;
    for (int i = 1; i < argc; i++)
        if (feed(argv[i], &count) != 0) {
            printf("0 passed, 1 failed\n");
            return 1;
        }
    printf("%d passed, 0 failed\n", count);
    return count > 0 ? 0 : 1;
}
