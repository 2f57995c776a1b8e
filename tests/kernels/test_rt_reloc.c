/* tests/kernels/test_rt_reloc.c -- the relocation formulas of both machines, applied to
** single instructions, whatever the host: every supported type, the edges of every
** range check and the alignment checks.  The expected AArch64 encodings come from the
** GNU assembler and llvm-mc (e.g. 'bl .+0x1000' at 0x1000 is 0x94000400), not from the
** code under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <elf.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels_rt.h"
#include "kernels/rt/rt_int.h"

enum { OK = 0, BAD = 1 };

typedef struct rcase {
    uint16_t machine;
    uint32_t type;
    uint64_t before; /* the field's bytes before, little-endian */
    uint64_t p, s;
    int64_t a;
    uint64_t got, got_base, z;
    int expect;      /* OK: 'after' is what the field holds; BAD: AT_ELOAD */
    uint64_t after;
} rcase;

#define A64(type, insn, p, s, a, expect, after)                                            \
    {EM_AARCH64, R_AARCH64_##type, insn, p, s, a, 0, 0, 0, expect, after}
#define A64G(type, insn, p, got, got_base, expect, after)                                  \
    {EM_AARCH64, R_AARCH64_##type, insn, p, 0, 0, got, got_base, 0, expect, after}
#define X86(type, p, s, a, expect, after)                                                  \
    {EM_X86_64, R_X86_64_##type, 0, p, s, a, 0, 0, 0, expect, after}
#define X86G(type, p, s, a, got, got_base, z, expect, after)                               \
    {EM_X86_64, R_X86_64_##type, 0, p, s, a, got, got_base, z, expect, after}

static const rcase cases[] = {
    /* branches: bl/b/b.ne/cbz/tbz with the assembler's encodings */
    A64(CALL26, 0x94000000, 0x1000, 0x2000, 0, OK, 0x94000400),
    A64(JUMP26, 0x14000000, 0x1004, 0x1000, 0, OK, 0x17ffffff),
    A64(CALL26, 0x94000000, 0x10000000, 0x10000000 + (1 << 27) - 4, 0, OK, 0x95ffffff),
    A64(CALL26, 0x94000000, 0x10000000, 0x10000000 - (1 << 27), 0, OK, 0x96000000),
    A64(CALL26, 0x94000000, 0x10000000, 0x10000000 + (1 << 27), 0, BAD, 0),
    A64(JUMP26, 0x14000000, 0x10000000, 0x10000000 - (1 << 27) - 4, 0, BAD, 0),
    A64(CALL26, 0x94000000, 0x1000, 0x2002, 0, BAD, 0), /* misaligned */
    A64(CALL26, 0x94000000, 0x7f0000001000ull, 0x401000, 0, BAD, 0), /* libm far away */
    A64(CONDBR19, 0x54000001, 0x1008, 0x1108, 0, OK, 0x54000801),
    A64(CONDBR19, 0xb4000000, 0x100c, 0x0fec, 0, OK, 0xb4ffff00),
    A64(CONDBR19, 0x54000001, 0x100000, 0x100000 + (1 << 20) - 4, 0, OK, 0x547fffe1),
    A64(CONDBR19, 0x54000001, 0x100000, 0x100000 + (1 << 20), 0, BAD, 0),
    A64(TSTBR14, 0x36180001, 0x1010, 0x1050, 0, OK, 0x36180201),
    A64(TSTBR14, 0x36180001, 0x100000, 0x100000 + (1 << 15), 0, BAD, 0),
    A64(TSTBR14, 0x36180001, 0x100000, 0x100000 - (1 << 15), 0, OK, 0x361c0001),
    A64(LD_PREL_LO19, 0x58000004, 0x101c, 0x111c, 0, OK, 0x58000804),
    A64(LD_PREL_LO19, 0x58000004, 0x100000, 0x100000 - (1 << 20) - 4, 0, BAD, 0),
    /* adr / adrp (llvm-mc: adrp x3, #20480 = 0xb0000023; #-12288 = 0xb0ffffe3) */
    A64(ADR_PREL_LO21, 0x10000002, 0x1014, 0x1014 + 0x12345, 0, OK, 0x30091a22),
    A64(ADR_PREL_LO21, 0x10000002, 0x100000, 0x100000 + (1 << 20), 0, BAD, 0),
    A64(ADR_PREL_PG_HI21, 0x90000003, 0x1018, 0x6018, 0, OK, 0xb0000023),
    A64(ADR_PREL_PG_HI21, 0x90000003, 0x1018, 0x6000, 0x18, OK, 0xb0000023),
    A64(ADR_PREL_PG_HI21, 0x90000003, 0x4040, 0x1fff, 0, OK, 0xb0ffffe3),
    A64(ADR_PREL_PG_HI21, 0x90000003, 0x1000, 0x1000 + (1ull << 32), 0, BAD, 0),
    A64(ADR_PREL_PG_HI21, 0x90000003, 0x100001000ull, 0x1000, 0, OK, 0x90800003),
    A64(ADR_PREL_PG_HI21_NC, 0x90000003, 0x1000, 0x1000 + (1ull << 32), 0, OK, 0x90800003),
    /* low 12 bits */
    A64(ADD_ABS_LO12_NC, 0x910000a5, 0, 0x7123, 0, OK, 0x91048ca5),
    A64(LDST8_ABS_LO12_NC, 0x3940014a, 0, 0x12fff, 0, OK, 0x397ffd4a),
    A64(LDST16_ABS_LO12_NC, 0x79400108, 0, 0x3022, 0, OK, 0x79404508),
    A64(LDST16_ABS_LO12_NC, 0x79400108, 0, 0x3023, 0, BAD, 0),
    A64(LDST32_ABS_LO12_NC, 0xb940016b, 0, 0x124, 0, OK, 0xb941256b),
    A64(LDST32_ABS_LO12_NC, 0xb940016b, 0, 0x122, 0, BAD, 0),
    A64(LDST64_ABS_LO12_NC, 0xf94000c6, 0, 0x5118, 0, OK, 0xf9408cc6),
    A64(LDST64_ABS_LO12_NC, 0xf94000c6, 0, 0x511c, 0, BAD, 0),
    A64(LDST128_ABS_LO12_NC, 0x3dc000e7, 0, 0x9110, 0x10, OK, 0x3dc048e7),
    A64(LDST128_ABS_LO12_NC, 0x3dc000e7, 0, 0x9128, 0, BAD, 0),
    /* movz/movk */
    A64(MOVW_UABS_G1_NC, 0xd2a00009, 0, 0xabcd12340000ull, 0, OK, 0xd2a24689),
    A64(MOVW_UABS_G3, 0xf2e00009, 0, 0x5678000000000000ull, 0, OK, 0xf2eacf09),
    A64(MOVW_UABS_G0, 0xd2800009, 0, 0xffff, 0, OK, 0xd29fffe9),
    A64(MOVW_UABS_G0, 0xd2800009, 0, 0x10000, 0, BAD, 0),
    A64(MOVW_UABS_G0_NC, 0xd2800009, 0, 0x10000, 0, OK, 0xd2800009),
    A64(MOVW_UABS_G1, 0xd2a00009, 0, 0x100000000ull, 0, BAD, 0),
    A64(MOVW_UABS_G2, 0xd2c00009, 0, 0xffff00000000ull, 0, OK, 0xd2dfffe9),
    A64(MOVW_UABS_G2, 0xd2c00009, 0, 0x1000000000000ull, 0, BAD, 0),
    A64(MOVW_UABS_G2_NC, 0xd2c00009, 0, 0x1000000000000ull, 0, OK, 0xd2c00009),
    /* data */
    A64(ABS64, 0, 0, 0x1122334455667780ull, 8, OK, 0x1122334455667788ull),
    A64(ABS32, 0, 0, 0xffffffffull, 0, OK, 0xffffffffull),
    A64(ABS32, 0, 0, (uint64_t)-0x80000000ll, 0, OK, 0x80000000ull),
    A64(ABS32, 0, 0, 0x100000000ull, 0, BAD, 0),
    A64(ABS32, 0, 0, (uint64_t)-0x80000001ll, 0, BAD, 0),
    A64(ABS16, 0, 0, 0xffff, 0, OK, 0xffff),
    A64(ABS16, 0, 0, 0x10000, 0, BAD, 0),
    A64(PREL64, 0, 0x2000, 0x1000, 0, OK, 0xfffffffffffff000ull),
    A64(PREL32, 0, 0x2000, 0x1000, 4, OK, 0xfffff004ull),
    A64(PREL32, 0, 0, 0x100000000ull, 0, BAD, 0),
    A64(PREL16, 0, 0x2000, 0x1000, 0, OK, 0xf000),
    A64(PREL16, 0, 0x20000, 0x1000, 0, BAD, 0),
    /* GOT */
    A64G(ADR_GOT_PAGE, 0x90000003, 0x1018, 0x6008, 0x6000, OK, 0xb0000023),
    A64G(ADR_GOT_PAGE, 0x90000003, 0x1000, 0x1000 + (1ull << 33), 0, BAD, 0),
    A64G(LD64_GOT_LO12_NC, 0xf94000c6, 0, 0x5118, 0x5000, OK, 0xf9408cc6),
    A64G(LD64_GOT_LO12_NC, 0xf94000c6, 0, 0x511c, 0x5000, BAD, 0),
    A64G(LD64_GOTPAGE_LO15, 0xf94000c6, 0, 0x5118, 0x5010, OK, 0xf9408cc6),
    A64G(LD64_GOTPAGE_LO15, 0xf94000c6, 0, 0xd000, 0x5000, BAD, 0),
    A64(NONE, 0x12345678, 0, 0, 0, OK, 0x12345678),

    X86(PC32, 0x1000, 0x2000, -4, OK, 0xffc),
    X86(PC32, 0x2000, 0x1000, -4, OK, 0xffffeffcull),
    X86(PLT32, 0x1000, 0x1000 + 0x7fffffffll + 4, -4, OK, 0x7fffffff),
    X86(PLT32, 0x1000, 0x1000 + 0x80000000ll + 4, -4, BAD, 0),
    X86(PC32, 0x80001000ull, 0x1000, 0, OK, 0x80000000ull),
    X86(PC32, 0x80001001ull, 0x1000, 0, BAD, 0),
    X86(64, 0, 0x1122334455667780ull, 8, OK, 0x1122334455667788ull),
    X86(32, 0, 0xffffffffull, 0, OK, 0xffffffffull),
    X86(32, 0, 0x7f0000001000ull, 0, BAD, 0),
    X86(32S, 0, 0xffffffff80000000ull, 0, OK, 0x80000000ull),
    X86(32S, 0, 0x80000000ull, 0, BAD, 0),
    X86(PC64, 0x7f0000000000ull, 0x1000, 0, OK, 0xffff810000001000ull),
    X86G(GOTPCREL, 0x1000, 0, -4, 0x3000, 0x3000, 0, OK, 0x1ffc),
    X86G(GOTPCRELX, 0x1000, 0, -4, 0x3008, 0x3000, 0, OK, 0x2004),
    X86G(REX_GOTPCRELX, 0x1000, 0, -4, 0x3010, 0x3000, 0, OK, 0x200c),
    X86G(REX_GOTPCRELX, 0x1000, 0, -4, 0x90001000ull, 0, 0, BAD, 0),
    X86G(GOTPCREL64, 0x1000, 0, 0, 0x7f0000001000ull, 0, 0, OK, 0x7f0000000000ull),
    X86G(GOTOFF64, 0, 0x5000, 8, 0, 0x3000, 0, OK, 0x2008),
    X86G(GOT64, 0, 0, 0, 0x3018, 0x3000, 0, OK, 0x18),
    X86G(PLTOFF64, 0, 0x1000, 0, 0, 0x3000, 0, OK, 0xffffffffffffe000ull),
    X86G(GOTPC32, 0x1000, 0, 3, 0, 0x3000, 0, OK, 0x2003),
    X86G(GOTPC64, 0x1000, 0, 3, 0, 0x3000, 0, OK, 0x2003),
    X86G(SIZE32, 0, 0, 4, 0, 0, 100, OK, 104),
    X86G(SIZE64, 0, 0, -4, 0, 0, 100, OK, 96),
    X86(NONE, 0, 0x1234, 0, OK, 0),
};

static void test_reloc_table(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < AT_ARRAY_LEN(cases); i++) {
        const rcase *c = &cases[i];
        uint8_t field[16];
        uint64_t got;
        unsigned w = kn_rt__reloc_width(c->machine, c->type);
        kn_rt__reloc r;
        char err[200] = "";
        at_err rc;
        memset(field, 0xee, sizeof field);
        for (unsigned k = 0; k < 8; k++)
            field[k] = (uint8_t)(c->before >> (8 * k));
        r.type = c->type;
        r.place = field;
        r.p = c->p;
        r.s = c->s;
        r.a = c->a;
        r.got = c->got;
        r.got_base = c->got_base;
        r.z = c->z;
        rc = kn_rt__reloc_apply(c->machine, &r, err, sizeof err);
        if (c->expect == BAD) {
            if (rc != AT_ELOAD || err[0] == 0)
                fail_msg("case %zu (%s): expected AT_ELOAD, got %s", i,
                         kn_rt__reloc_name(c->machine, c->type), at_errname(rc));
            continue;
        }
        if (rc != AT_OK)
            fail_msg("case %zu (%s): %s", i, kn_rt__reloc_name(c->machine, c->type), err);
        got = 0;
        for (unsigned k = 0; k < 8; k++)
            got |= (uint64_t)field[k] << (8 * k);
        if (w > 0 && w < 8) { /* the field; the bytes after it must be as before */
            uint64_t mask = ((uint64_t)1 << (8 * w)) - 1;
            if ((got & ~mask) != (c->before & ~mask))
                fail_msg("case %zu: wrote past its %u bytes", i, w);
            got &= mask;
        }
        if (got != c->after)
            fail_msg("case %zu (%s): 0x%llx, expected 0x%llx", i,
                     kn_rt__reloc_name(c->machine, c->type), (unsigned long long)got,
                     (unsigned long long)c->after);
        for (unsigned k = 8; k < 16; k++)
            if (field[k] != 0xee)
                fail_msg("case %zu: wrote past 8 bytes", i);
    }
}

static void test_reloc_tables_agree(void **unused)
{
    (void)unused;
    assert_int_equal(kn_rt__reloc_width(EM_X86_64, R_X86_64_64), 8);
    assert_int_equal(kn_rt__reloc_width(EM_X86_64, R_X86_64_PLT32), 4);
    assert_int_equal(kn_rt__reloc_width(EM_AARCH64, R_AARCH64_ABS16), 2);
    assert_int_equal(kn_rt__reloc_width(EM_AARCH64, 9999), 0);
    assert_int_equal(kn_rt__reloc_kind(EM_X86_64, R_X86_64_PLT32), KN_RT__RK_BRANCH);
    assert_int_equal(kn_rt__reloc_kind(EM_X86_64, R_X86_64_GOTPCRELX), KN_RT__RK_GOT);
    assert_int_equal(kn_rt__reloc_kind(EM_AARCH64, R_AARCH64_CALL26), KN_RT__RK_BRANCH);
    assert_int_equal(kn_rt__reloc_kind(EM_AARCH64, R_AARCH64_ADR_GOT_PAGE), KN_RT__RK_GOT);
    assert_int_equal(kn_rt__reloc_kind(EM_X86_64, R_X86_64_TPOFF32), KN_RT__RK_UNKNOWN);
    assert_int_equal(kn_rt__reloc_kind(EM_386, 1), KN_RT__RK_UNKNOWN);
    assert_string_equal(kn_rt__reloc_name(EM_X86_64, R_X86_64_PC32), "R_X86_64_PC32");
    assert_null(kn_rt__reloc_name(EM_AARCH64, 1));
    /* every type of the tables has a formula: none falls through to "unsupported" */
    for (uint32_t t = 0; t < 1024; t++) {
        uint16_t ms[2] = {EM_X86_64, EM_AARCH64};
        for (int m = 0; m < 2; m++) {
            uint8_t field[8] = {0};
            kn_rt__reloc r = {t, field, 0x1000, 0x1000, 0, 0x1000, 0x1000, 0};
            char err[200] = "";
            at_err rc = kn_rt__reloc_apply(ms[m], &r, err, sizeof err);
            if (kn_rt__reloc_kind(ms[m], t) == KN_RT__RK_UNKNOWN)
                assert_int_equal(rc, AT_ELOAD);
            else if (rc != AT_OK)
                fail_msg("%s: %s", kn_rt__reloc_name(ms[m], t), err);
        }
    }
}

static void test_stubs(void **unused)
{
    static const uint8_t x86[16] = {0xff, 0x25, 0, 0, 0, 0, 0x88, 0x77, 0x66, 0x55,
                                    0x44, 0x33, 0x22, 0x11, 0xcc, 0xcc};
    static const uint8_t a64[16] = {0x50, 0x00, 0x00, 0x58, 0x00, 0x02, 0x1f, 0xd6,
                                    0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
    uint8_t s[KN_RT__STUB_BYTES];
    (void)unused;
    kn_rt__stub_write(EM_X86_64, s, 0x1122334455667788ull);
    assert_memory_equal(s, x86, 16);
    kn_rt__stub_write(EM_AARCH64, s, 0x1122334455667788ull);
    assert_memory_equal(s, a64, 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reloc_table),
        cmocka_unit_test(test_reloc_tables_agree),
        cmocka_unit_test(test_stubs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
