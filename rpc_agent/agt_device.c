/* rpc_agent/agt_device.c -- what the agent reads about its machine: the fingerprint fields
** (uname, /proc/cpuinfo, online CPUs) and the device state that goes with every result
** (sysfs cpufreq, sysfs thermal zones, /proc/loadavg).  Missing files are normal (phones
** hide some, containers others): the value is then -1 and nothing is flagged for it. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "rpc_agent/rpc_agent.h"

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = 0;
}

/* The value after "key\t: " of the first matching line of /proc/cpuinfo. */
static int cpuinfo(const char *key, char *out, size_t n)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    size_t kn = strlen(key);
    int found = 0;
    if (f == NULL) return 0;
    while (!found && fgets(line, sizeof line, f)) {
        char *colon;
        if (strncmp(line, key, kn) != 0 || (line[kn] != ' ' && line[kn] != '\t' && line[kn] != ':'))
            continue;
        if ((colon = strchr(line, ':')) == NULL) continue;
        colon++;
        while (*colon == ' ')
            colon++;
        snprintf(out, n, "%s", colon);
        trim(out);
        found = out[0] != 0;
    }
    fclose(f);
    return found;
}

void agt_device_read(agt_device *d)
{
    struct utsname u;
    long n;
    memset(d, 0, sizeof *d);
    if (uname(&u) == 0) {
        snprintf(d->arch, sizeof d->arch, "%.31s", u.machine);
        snprintf(d->os, sizeof d->os, "%.127s", u.release);
    } else {
        snprintf(d->arch, sizeof d->arch, "unknown");
        snprintf(d->os, sizeof d->os, "unknown");
    }
    if (strcmp(d->arch, "x86_64") == 0)
        snprintf(d->triple, sizeof d->triple, "x86_64-pc-linux-gnu");
    else if (strcmp(d->arch, "aarch64") == 0 || strcmp(d->arch, "arm64") == 0)
        snprintf(d->triple, sizeof d->triple, "aarch64-linux-gnu");
    else
        snprintf(d->triple, sizeof d->triple, "%.31s-linux-gnu", d->arch);
    if (!cpuinfo("model name", d->model, sizeof d->model) &&
        !cpuinfo("Hardware", d->model, sizeof d->model)) {
        char impl[32] = "", part[32] = "";
        if (cpuinfo("CPU implementer", impl, sizeof impl) && cpuinfo("CPU part", part, sizeof part))
            snprintf(d->model, sizeof d->model, "ARM implementer %s part %s", impl, part);
        else
            snprintf(d->model, sizeof d->model, "%s CPU", d->arch);
    }
    if (!cpuinfo("flags", d->features, sizeof d->features))
        cpuinfo("Features", d->features, sizeof d->features);
    n = sysconf(_SC_NPROCESSORS_ONLN);
    d->n_cores = n > 0 ? (int)n : 1;
}

static double read_num(const char *path)
{
    FILE *f = fopen(path, "r");
    double v;
    if (f == NULL) return -1;
    if (fscanf(f, "%lf", &v) != 1) v = -1;
    fclose(f);
    return v;
}

void agt_device_state(double hot_c, double loaded_per_core, int n_cores, at_wire_devstate *s)
{
    DIR *dir;
    double v;
    s->cpu_mhz = s->cpu_max_mhz = s->temp_c = s->load1 = -1;
    s->throttled = s->loaded = 0;
    if ((v = read_num("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")) > 0)
        s->cpu_mhz = v / 1000.0;
    if ((v = read_num("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")) > 0)
        s->cpu_max_mhz = v / 1000.0;
    if ((dir = opendir("/sys/class/thermal")) != NULL) {
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            char path[512];
            if (strncmp(e->d_name, "thermal_zone", 12) != 0) continue;
            snprintf(path, sizeof path, "/sys/class/thermal/%s/temp", e->d_name);
            if ((v = read_num(path)) > -1000 && v != -1) {
                v = v > 1000 ? v / 1000.0 : v; /* millidegrees on Linux */
                if (v > s->temp_c) s->temp_c = v;
            }
        }
        closedir(dir);
    }
    s->load1 = read_num("/proc/loadavg");
    if (s->temp_c >= hot_c && hot_c > 0) s->throttled = 1;
    /* well below the maximum clock while busy measuring: throttled (power or heat) */
    if (s->cpu_mhz > 0 && s->cpu_max_mhz > 0 && s->cpu_mhz < 0.5 * s->cpu_max_mhz &&
        s->load1 >= 0.5)
        s->throttled = 1;
    if (s->load1 >= 0 && loaded_per_core > 0 && s->load1 > loaded_per_core * n_cores + 1.0)
        s->loaded = 1;
}
