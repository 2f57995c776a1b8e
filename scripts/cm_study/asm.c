/* scripts/cm_study/asm.c -- what LLVM emitted for every record of a store, as numbers (issue
** 16 study: does the machine code rank the fast programs where the schedule's features do
** not?).  Each record's state is rebuilt for its target (-O3, as measured), the object's
** code disassembled with LLVM's disassembler, loops found from backward branches, and each
** instruction classed (FMA, vector load, store, broadcast, stack access, prefetch, other).
** One line a record: record id, then the counts of the innermost loops and per loop depth
** (0-4), then the code's size.  Optional second argument: keep every Nth record starting
** at the third argument (to split the work over processes).  For asm.py; not the product. */
#include "kernels/kernels.h"
#include "records/records.h"
#include "schedule_space/schedule_space.h"
#include <llvm-c/Core.h>
#include <llvm-c/Disassembler.h>
#include <llvm-c/Object.h>
#include <llvm-c/Target.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { C_ALL, C_FMA, C_VLOAD, C_VSTORE, C_BCAST, C_STACK, C_PREF, C_MEMFMA, C_ZMM, C_N };
#define MAXD 5
#define MAXI 200000

typedef struct { uint64_t at; int size; int cls[C_N]; int64_t target; char text[80]; } ins;
/* ASM_HOT_DIR: the record's hottest innermost loop (most FMAs) written to DIR/ID.s for
** llvm-mca (mca.py) */
static const char *hot_dir;
static long long cur_id;
static double hot_best;

static void classify(const char *t, ins *in)
{
    const char *p = t;
    while (*p == ' ' || *p == '\t') p++;
    char mn[32]; int k = 0;
    while (*p && *p != ' ' && *p != '\t' && k < 31) mn[k++] = *p++;
    mn[k] = 0;
    const char *ops = p;
    int mem = strchr(ops, '(') != NULL;
    int vec = strstr(ops, "mm") != NULL;
    in->cls[C_ALL] = 1;
    if (strstr(ops, "zmm")) in->cls[C_ZMM] = 1;
    if (!strncmp(mn, "vfmadd", 6) || !strncmp(mn, "vfnmadd", 7) || !strncmp(mn, "vfmsub", 6)) {
        in->cls[C_FMA] = 1;
        if (mem) in->cls[C_MEMFMA] = 1;
    } else if (!strncmp(mn, "prefetch", 8)) in->cls[C_PREF] = 1;
    else if (!strncmp(mn, "vbroadcast", 10)) in->cls[C_BCAST] = 1;
    else if (vec && mem && !strncmp(mn, "vmov", 4)) {
        /* AT&T: source first; a store's memory operand comes last */
        const char *par = strchr(ops, '('), *comma = strchr(ops, ',');
        if (comma && par < comma) in->cls[C_VLOAD] = 1; else in->cls[C_VSTORE] = 1;
    }
    if (mem && (strstr(ops, "(%rsp") || strstr(ops, "(%rbp"))) in->cls[C_STACK] = 1;
    in->target = -1;
    if (mn[0] == 'j') { /* relative displacement printed as a number */
        char *e; long long d = strtoll(ops, &e, 0);
        if (e != ops) in->target = (int64_t)(in->at + in->size) + d;
    }
}

static int analyse(const uint8_t *code, size_t n, LLVMDisasmContextRef dc, double *out)
{
    static ins v[MAXI];
    int ni = 0;
    char text[256];
    for (size_t at = 0; at < n && ni < MAXI;) {
        size_t sz = LLVMDisasmInstruction(dc, (uint8_t *)code + at, n - at, at, text, sizeof text);
        if (!sz) { at++; continue; }
        memset(&v[ni], 0, sizeof v[ni]);
        v[ni].at = at; v[ni].size = (int)sz;
        classify(text, &v[ni]);
        snprintf(v[ni].text, sizeof v[ni].text, "%.79s", text);
        if (getenv("ASM_PRINT")) printf("%6zu %s\n", at, text);
        ni++; at += sz;
    }
    /* loops: [target, branch] for each backward branch */
    static int depth[MAXI], inner[MAXI];
    memset(depth, 0, sizeof(int) * ni); memset(inner, 0, sizeof(int) * ni);
    int nloops = 0;
    for (int i = 0; i < ni; i++) {
        if (v[i].target < 0 || v[i].target > (int64_t)v[i].at) continue;
        nloops++;
        int contains_other = 0;
        for (int j = 0; j < ni; j++)
            if (j != i && v[j].target >= 0 && v[j].target <= (int64_t)v[j].at &&
                v[j].target >= v[i].target && v[j].at < v[i].at) contains_other = 1;
        for (int j = 0; j < ni; j++)
            if ((int64_t)v[j].at >= v[i].target && v[j].at <= v[i].at) {
                depth[j]++;
                if (!contains_other) inner[j] = 1;
            }
    }
    /* trip counts: "cmp $N, %r" before the branch and "add $s, %r" / "inc %r" in the loop:
    ** N / s (a counter from 0); else 8 */
    static double w[MAXI], itrip[MAXI];
    int n_default = 0;
    for (int j = 0; j < ni; j++) w[j] = 1;
    for (int i = 0; i < ni; i++) {
        if (v[i].target < 0 || v[i].target > (int64_t)v[i].at) continue;
        double trip = 8;
        for (int b = i - 1; b >= 0 && b >= i - 2; b--) {
            long long n; char reg[16];
            if (sscanf(v[b].text, " cmp%*c $%lld, %%%15[a-z0-9]", &n, reg) == 2) {
                for (int j = b - 1; j >= 0 && (int64_t)v[j].at >= v[i].target; j--) {
                    long long st; char r2[16];
                    if (sscanf(v[j].text, " add%*c $%lld, %%%15[a-z0-9]", &st, r2) == 2 && !strcmp(r2, reg) && st > 0) { trip = (double)n / st; break; }
                    if (sscanf(v[j].text, " inc%*c %%%15[a-z0-9]", r2) == 1 && !strcmp(r2, reg)) { trip = (double)n; break; }
                }
                break;
            }
        }
        if (trip == 8 && i > 0) { /* a counter from -N up to 0: "add $s, %r; jne", "mov $-N, %r" before */
            long long st, n; char reg[16], r2[16];
            if (sscanf(v[i - 1].text, " add%*c $%lld, %%%15[a-z0-9]", &st, reg) == 2 && st > 0)
                for (int j = i - 2; j >= 0 && j >= i - 400; j--) {
                    if ((int64_t)v[j].at >= v[i].target) continue;
                    if (sscanf(v[j].text, " mov%*c $%lld, %%%15[a-z0-9]", &n, r2) == 2 && n < 0 &&
                        !strcmp(r2, reg)) { trip = (double)-n / st; break; }
                    if ((int64_t)v[j].at < v[i].target - 64) break;
                }
        }
        if (trip < 1) trip = 1;
        if (trip == 8) n_default++;
        itrip[i] = trip;
        for (int j = 0; j < ni; j++)
            if ((int64_t)v[j].at >= v[i].target && v[j].at <= v[i].at) w[j] *= trip;
    }
    /* a cycle estimate: each innermost loop at the bound of its FMAs (2 a cycle), loads (3),
    ** stores (2) and instructions (6); everything else at 4 instructions a cycle */
    double cyc = 0, hot[10] = {0};
    static int done[MAXI];
    memset(done, 0, sizeof(int) * ni);
    for (int i = 0; i < ni; i++) {
        if (v[i].target < 0 || v[i].target > (int64_t)v[i].at) continue;
        int a0 = -1;
        for (int j = 0; j < ni; j++) if ((int64_t)v[j].at >= v[i].target && v[j].at <= v[i].at) { if (a0 < 0) a0 = j; if (!inner[j]) { a0 = -2; break; } }
        if (a0 < 0) continue;
        double nf = 0, nl = 0, ns = 0, na = 0;
        for (int j = a0; j <= i; j++) {
            nf += v[j].cls[C_FMA]; na += 1; ns += v[j].cls[C_VSTORE];
            nl += v[j].cls[C_VLOAD] + v[j].cls[C_BCAST] + v[j].cls[C_MEMFMA];
            if (v[j].cls[C_STACK] && !v[j].cls[C_VSTORE] && !v[j].cls[C_VLOAD]) nl += 1;
            done[j] = 1;
        }
        double b = nf / 2; if (nl / 3 > b) b = nl / 3; if (ns / 2 > b) b = ns / 2; if (na / 6 > b) b = na / 6;
        cyc += b * w[i];
        if (nf > hot[0] || (nf == hot[0] && w[i] > hot[7])) {
            double sk = 0, z = 0, bc = 0;
            for (int j = a0; j <= i; j++) { sk += v[j].cls[C_STACK]; z += v[j].cls[C_ZMM]; bc += v[j].cls[C_BCAST]; }
            hot[0] = nf; hot[1] = nl; hot[2] = ns; hot[3] = na; hot[4] = sk; hot[5] = z; hot[6] = bc;
            hot[7] = w[i]; hot[8] = itrip[i]; hot[9] = nf > 0 ? b / nf : 0;
            if (hot_dir && nf > hot_best) {
                char fn[4096];
                snprintf(fn, sizeof fn, "%s/%lld.s", hot_dir, cur_id);
                FILE *f = fopen(fn, "w");
                if (f) {
                    for (int j = a0; j < i; j++) fprintf(f, "%s\n", v[j].text);
                    fclose(f);
                }
                hot_best = nf;
            }
        }
    }
    for (int j = 0; j < ni; j++) if (!done[j]) cyc += w[j] / 4;
    double dyn[C_N] = {0};
    for (int j = 0; j < ni; j++) for (int c = 0; c < C_N; c++) dyn[c] += w[j] * v[j].cls[c];
    double *o = out;
    for (int c = 0; c < C_N; c++) o[c] = 0;
    for (int d = 0; d < MAXD; d++) for (int c = 0; c < C_N; c++) o[C_N * (1 + d) + c] = 0;
    int maxd = 0;
    for (int i = 0; i < ni; i++) {
        if (depth[i] > maxd) maxd = depth[i];
        for (int c = 0; c < C_N; c++) {
            if (inner[i]) o[c] += v[i].cls[c];
            int d = depth[i] < MAXD ? depth[i] : MAXD - 1;
            o[C_N * (1 + d) + c] += v[i].cls[c];
        }
    }
    o[C_N * (1 + MAXD)] = nloops;
    o[C_N * (1 + MAXD) + 1] = maxd;
    o[C_N * (1 + MAXD) + 2] = (double)n;
    for (int c = 0; c < C_N; c++) o[C_N * (1 + MAXD) + 3 + c] = dyn[c];
    o[C_N * (2 + MAXD) + 3] = n_default;
    o[C_N * (2 + MAXD) + 4] = cyc;
    for (int k = 0; k < 10; k++) o[C_N * (2 + MAXD) + 5 + k] = hot[k];
    return C_N * (2 + MAXD) + 15;
}

int main(int argc, char **argv)
{
    rec_store *st; rec_iter *it; const rec_record *r; char msg[512];
    ss_dag *dag = NULL; char *dag_text = NULL;
    int every = argc > 2 ? atoi(argv[2]) : 1, first = argc > 3 ? atoi(argv[3]) : 0, k = 0;
    if (argc < 2) { fprintf(stderr, "usage: asm STORE [EVERY FIRST]\n"); return 2; }
    LLVMInitializeX86TargetInfo(); LLVMInitializeX86TargetMC(); LLVMInitializeX86Disassembler();
    if (rec_store_open(argv[1], REC_OPEN_READONLY, &st, msg, sizeof msg) != AT_OK) { fprintf(stderr, "asm: %s: %s\n", argv[1], msg); return 1; }
    kn_target tg; char tg_text[256] = "";
    LLVMDisasmContextRef dc = NULL;
    rec_iter_open(st, NULL, REC_ORDER_STABLE, &it);
    while (rec_iter_next(it, &r) == AT_OK && r) {
        if (k++ % every != first) continue;
        if (getenv("ASM_PRINT") && atoll(getenv("ASM_PRINT")) != r->id) continue;
        ss_state *s = NULL; kn_artifact *a = NULL;
        hot_dir = getenv("ASM_HOT_DIR"); cur_id = r->id; hot_best = 0;
        if (strcmp(tg_text, r->target)) {
            if (kn_target_parse(r->target, &tg, msg, sizeof msg) != AT_OK) { fprintf(stderr, "asm: target %s: %s\n", r->target, msg); return 1; }
            snprintf(tg_text, sizeof tg_text, "%s", r->target);
            if (dc) LLVMDisasmDispose(dc);
            dc = LLVMCreateDisasmCPUFeatures(tg.triple, tg.cpu, tg.features, NULL, 0, NULL, NULL);
            if (!dc) { fprintf(stderr, "asm: no disassembler for %s\n", tg.triple); return 1; }
        }
        if (!dag_text || strcmp(dag_text, r->dag)) { ss_dag_unref(dag); dag = NULL; free(dag_text); dag_text = strdup(r->dag);
            if (ss_dag_parse(r->dag, strlen(r->dag), &dag, msg, sizeof msg) != AT_OK) dag = NULL; }
        if (!dag || ss_state_from_json(dag, r->state, strlen(r->state), &s, msg, sizeof msg) != AT_OK) continue;
        at_err e = kn_build_state(s, &tg, NULL, &a, msg, sizeof msg);
        ss_state_free(s);
        if (e != AT_OK) continue;
        LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)a->obj, a->obj_size, "o");
        char *err = NULL;
        LLVMBinaryRef bin = LLVMCreateBinary(mb, NULL, &err);
        if (!bin) { fprintf(stderr, "asm: %s\n", err ? err : "?"); LLVMDisposeMessage(err); LLVMDisposeMemoryBuffer(mb); kn_artifact_free(a); continue; }
        double f[256], sum[256] = {0}; int nf = 0;
        LLVMSectionIteratorRef si = LLVMObjectFileCopySectionIterator(bin);
        for (; !LLVMObjectFileIsSectionIteratorAtEnd(bin, si); LLVMMoveToNextSection(si)) {
            const char *nm = LLVMGetSectionName(si);
            if (!nm || strncmp(nm, ".text", 5)) continue;
            nf = analyse((const uint8_t *)LLVMGetSectionContents(si), LLVMGetSectionSize(si), dc, f);
            for (int i = 0; i < nf; i++) sum[i] += f[i];
        }
        LLVMDisposeSectionIterator(si);
        LLVMDisposeBinary(bin);
        LLVMDisposeMemoryBuffer(mb);
        kn_artifact_free(a);
        printf("%lld", (long long)r->id);
        for (int i = 0; i < nf; i++) printf(" %g", sum[i]);
        printf("\n");
        fflush(stdout);
    }
    rec_iter_close(it); rec_store_close(st);
    if (dc) LLVMDisasmDispose(dc);
    return 0;
}
