/* tuner/main.c -- the 'tuner' command; everything is in tn_cli_main (tuner/tn_cli.c). */
#include "tuner/tuner.h"

int main(int argc, char **argv)
{
    return tn_cli_main(argc, argv);
}
