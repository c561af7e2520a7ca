/* cpulm.c: main() of the cpulm command: a table of subcommands. */
#include <stdio.h>
#include <string.h>

#include "cpulm.h"

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) {
        printf("cpulm %s\n", cpulm_version());
        return 0;
    }
    fprintf(stderr, "usage: cpulm <command> [options]\n");
    return 2;
}
