/* kernels/rt/rt_reloc.c -- relocation formulas of x86-64 and AArch64 (psABI names:
** S symbol, A addend, P place, G the symbol's GOT slot, GOT the GOT's start, Z the
** symbol's size, Page(x) = x & ~0xfff).
**
** Each machine has one table (X-macro) of the supported types: name, bytes patched and
** what the loader must prepare (a GOT slot, a call stub).  Every PC-relative or
** range-limited field is checked: a value that does not fit is AT_ELOAD, never a silently
** truncated branch.  Both machines are compiled on every host; the loader only applies
** the host's.  Bytes are read and written little-endian one at a time, so nothing here
** depends on the host's byte order or on the alignment of 'place'. */
#include "rt_int.h"

#include <elf.h>
#include <stdio.h>

/* ---- the tables ----------------------------------------------------------------------- */

#define X86_RELOCS(X)                                                                      \
    X(R_X86_64_NONE, 0, KN_RT__RK_NONE)                                                    \
    X(R_X86_64_64, 8, KN_RT__RK_PLAIN)                                                     \
    X(R_X86_64_PC32, 4, KN_RT__RK_PLAIN)                                                   \
    X(R_X86_64_PLT32, 4, KN_RT__RK_BRANCH)                                                 \
    X(R_X86_64_GOTPCREL, 4, KN_RT__RK_GOT)                                                 \
    X(R_X86_64_32, 4, KN_RT__RK_PLAIN)                                                     \
    X(R_X86_64_32S, 4, KN_RT__RK_PLAIN)                                                    \
    X(R_X86_64_PC64, 8, KN_RT__RK_PLAIN)                                                   \
    X(R_X86_64_GOT64, 8, KN_RT__RK_GOT)                                                    \
    X(R_X86_64_PLTOFF64, 8, KN_RT__RK_BRANCH)                                              \
    X(R_X86_64_GOTOFF64, 8, KN_RT__RK_PLAIN)                                               \
    X(R_X86_64_GOTPC32, 4, KN_RT__RK_PLAIN)                                                \
    X(R_X86_64_GOTPCREL64, 8, KN_RT__RK_GOT)                                               \
    X(R_X86_64_GOTPC64, 8, KN_RT__RK_PLAIN)                                                \
    X(R_X86_64_SIZE32, 4, KN_RT__RK_PLAIN)                                                 \
    X(R_X86_64_SIZE64, 8, KN_RT__RK_PLAIN)                                                 \
    X(R_X86_64_GOTPCRELX, 4, KN_RT__RK_GOT)                                                \
    X(R_X86_64_REX_GOTPCRELX, 4, KN_RT__RK_GOT)

#define A64_RELOCS(X)                                                                      \
    X(R_AARCH64_NONE, 0, KN_RT__RK_NONE)                                                   \
    X(R_AARCH64_ABS64, 8, KN_RT__RK_PLAIN)                                                 \
    X(R_AARCH64_ABS32, 4, KN_RT__RK_PLAIN)                                                 \
    X(R_AARCH64_ABS16, 2, KN_RT__RK_PLAIN)                                                 \
    X(R_AARCH64_PREL64, 8, KN_RT__RK_PLAIN)                                                \
    X(R_AARCH64_PREL32, 4, KN_RT__RK_PLAIN)                                                \
    X(R_AARCH64_PREL16, 2, KN_RT__RK_PLAIN)                                                \
    X(R_AARCH64_MOVW_UABS_G0, 4, KN_RT__RK_PLAIN)                                          \
    X(R_AARCH64_MOVW_UABS_G0_NC, 4, KN_RT__RK_PLAIN)                                       \
    X(R_AARCH64_MOVW_UABS_G1, 4, KN_RT__RK_PLAIN)                                          \
    X(R_AARCH64_MOVW_UABS_G1_NC, 4, KN_RT__RK_PLAIN)                                       \
    X(R_AARCH64_MOVW_UABS_G2, 4, KN_RT__RK_PLAIN)                                          \
    X(R_AARCH64_MOVW_UABS_G2_NC, 4, KN_RT__RK_PLAIN)                                       \
    X(R_AARCH64_MOVW_UABS_G3, 4, KN_RT__RK_PLAIN)                                          \
    X(R_AARCH64_LD_PREL_LO19, 4, KN_RT__RK_PLAIN)                                          \
    X(R_AARCH64_ADR_PREL_LO21, 4, KN_RT__RK_PLAIN)                                         \
    X(R_AARCH64_ADR_PREL_PG_HI21, 4, KN_RT__RK_PLAIN)                                      \
    X(R_AARCH64_ADR_PREL_PG_HI21_NC, 4, KN_RT__RK_PLAIN)                                   \
    X(R_AARCH64_ADD_ABS_LO12_NC, 4, KN_RT__RK_PLAIN)                                       \
    X(R_AARCH64_LDST8_ABS_LO12_NC, 4, KN_RT__RK_PLAIN)                                     \
    X(R_AARCH64_LDST16_ABS_LO12_NC, 4, KN_RT__RK_PLAIN)                                    \
    X(R_AARCH64_LDST32_ABS_LO12_NC, 4, KN_RT__RK_PLAIN)                                    \
    X(R_AARCH64_LDST64_ABS_LO12_NC, 4, KN_RT__RK_PLAIN)                                    \
    X(R_AARCH64_LDST128_ABS_LO12_NC, 4, KN_RT__RK_PLAIN)                                   \
    X(R_AARCH64_TSTBR14, 4, KN_RT__RK_PLAIN)                                               \
    X(R_AARCH64_CONDBR19, 4, KN_RT__RK_PLAIN)                                              \
    X(R_AARCH64_JUMP26, 4, KN_RT__RK_BRANCH)                                               \
    X(R_AARCH64_CALL26, 4, KN_RT__RK_BRANCH)                                               \
    X(R_AARCH64_ADR_GOT_PAGE, 4, KN_RT__RK_GOT)                                            \
    X(R_AARCH64_LD64_GOT_LO12_NC, 4, KN_RT__RK_GOT)                                        \
    X(R_AARCH64_LD64_GOTPAGE_LO15, 4, KN_RT__RK_GOT)

typedef struct reloc_info {
    uint32_t type;
    const char *name;
    unsigned width;
    int kind;
} reloc_info;

static const reloc_info x86_relocs[] = {
#define X(t, w, k) {t, #t, w, k},
    X86_RELOCS(X)
#undef X
};

static const reloc_info a64_relocs[] = {
#define X(t, w, k) {t, #t, w, k},
    A64_RELOCS(X)
#undef X
};

static const reloc_info *find_info(uint16_t machine, uint32_t type)
{
    const reloc_info *tab;
    size_t n;
    if (machine == EM_X86_64) {
        tab = x86_relocs;
        n = AT_ARRAY_LEN(x86_relocs);
    } else if (machine == EM_AARCH64) {
        tab = a64_relocs;
        n = AT_ARRAY_LEN(a64_relocs);
    } else {
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (tab[i].type == type)
            return &tab[i];
    return NULL;
}

int kn_rt__reloc_kind(uint16_t machine, uint32_t type)
{
    const reloc_info *ri = find_info(machine, type);
    return ri ? ri->kind : KN_RT__RK_UNKNOWN;
}

unsigned kn_rt__reloc_width(uint16_t machine, uint32_t type)
{
    const reloc_info *ri = find_info(machine, type);
    return ri ? ri->width : 0;
}

const char *kn_rt__reloc_name(uint16_t machine, uint32_t type)
{
    const reloc_info *ri = find_info(machine, type);
    return ri ? ri->name : NULL;
}

/* ---- little-endian access ------------------------------------------------------------ */

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr16(uint8_t *p, uint64_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void wr32(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* 'v', read as a two's-complement number, fits in a signed field of 'bits' bits. */
static int fits_signed(uint64_t v, unsigned bits)
{
    int64_t s = (int64_t)v;
    int64_t lim = (int64_t)1 << (bits - 1);
    return s >= -lim && s < lim;
}

/* Fits a 'bits'-bit field read as signed or as unsigned (data relocations). */
static int fits_either(uint64_t v, unsigned bits)
{
    return fits_signed(v, bits) || v < ((uint64_t)1 << bits);
}

static at_err overflow(const kn_rt__reloc *r, const char *name, uint64_t v, char *errmsg,
                       size_t errmsg_size)
{
    if (errmsg && errmsg_size)
        snprintf(errmsg, errmsg_size,
                 "relocation %s at %p: value 0x%llx out of range of its field", name,
                 (void *)r->place, (unsigned long long)v);
    return AT_ELOAD;
}

/* ---- x86-64 --------------------------------------------------------------------------- */

static at_err apply_x86(const kn_rt__reloc *r, const char *name, char *errmsg,
                        size_t errmsg_size)
{
    uint64_t s = r->s, a = (uint64_t)r->a, p = r->p, v;
    switch (r->type) {
    case R_X86_64_NONE:
        return AT_OK;
    case R_X86_64_64:
        wr64(r->place, s + a);
        return AT_OK;
    case R_X86_64_PC32:
    case R_X86_64_PLT32:
        v = s + a - p;
        if (!fits_signed(v, 32))
            return overflow(r, name, v, errmsg, errmsg_size);
        wr32(r->place, v);
        return AT_OK;
    case R_X86_64_GOTPCREL:
    case R_X86_64_GOTPCRELX:
    case R_X86_64_REX_GOTPCRELX:
        v = r->got + a - p;
        if (!fits_signed(v, 32))
            return overflow(r, name, v, errmsg, errmsg_size);
        wr32(r->place, v);
        return AT_OK;
    case R_X86_64_32:
        v = s + a;
        if (v > 0xffffffffu)
            return overflow(r, name, v, errmsg, errmsg_size);
        wr32(r->place, v);
        return AT_OK;
    case R_X86_64_32S:
        v = s + a;
        if (!fits_signed(v, 32))
            return overflow(r, name, v, errmsg, errmsg_size);
        wr32(r->place, v);
        return AT_OK;
    case R_X86_64_PC64:
        wr64(r->place, s + a - p);
        return AT_OK;
    case R_X86_64_GOT64: /* large code model: the slot's offset in the GOT */
        wr64(r->place, r->got + a - r->got_base);
        return AT_OK;
    case R_X86_64_PLTOFF64: /* large code model: a call target (stub) relative to the GOT */
    case R_X86_64_GOTOFF64:
        wr64(r->place, s + a - r->got_base);
        return AT_OK;
    case R_X86_64_GOTPC32:
        v = r->got_base + a - p;
        if (!fits_signed(v, 32))
            return overflow(r, name, v, errmsg, errmsg_size);
        wr32(r->place, v);
        return AT_OK;
    case R_X86_64_GOTPCREL64:
        wr64(r->place, r->got + a - p);
        return AT_OK;
    case R_X86_64_GOTPC64:
        wr64(r->place, r->got_base + a - p);
        return AT_OK;
    case R_X86_64_SIZE32:
        v = r->z + a;
        if (!fits_either(v, 32))
            return overflow(r, name, v, errmsg, errmsg_size);
        wr32(r->place, v);
        return AT_OK;
    case R_X86_64_SIZE64:
        wr64(r->place, r->z + a);
        return AT_OK;
    default:
        break;
    }
    if (errmsg && errmsg_size)
        snprintf(errmsg, errmsg_size, "unsupported x86-64 relocation type %u", r->type);
    return AT_ELOAD;
}

/* ---- AArch64 -------------------------------------------------------------------------- */

static uint64_t page(uint64_t x)
{
    return x & ~(uint64_t)0xfff;
}

/* Patch an instruction: clear 'mask', or in 'bits' (already shifted). */
static void patch(uint8_t *place, uint32_t mask, uint32_t bits)
{
    uint32_t insn = rd32(place);
    wr32(place, (insn & ~mask) | (bits & mask));
}

/* ADR/ADRP immediate: immlo in bits 30:29, immhi in bits 23:5. */
static void patch_adr(uint8_t *place, uint64_t imm21)
{
    uint32_t lo = (uint32_t)(imm21 & 3), hi = (uint32_t)((imm21 >> 2) & 0x7ffff);
    patch(place, 0x60ffffe0u, lo << 29 | hi << 5);
}

static at_err misaligned(const kn_rt__reloc *r, const char *name, uint64_t v, char *errmsg,
                         size_t errmsg_size)
{
    if (errmsg && errmsg_size)
        snprintf(errmsg, errmsg_size, "relocation %s at %p: value 0x%llx is misaligned",
                 name, (void *)r->place, (unsigned long long)v);
    return AT_ELOAD;
}

static at_err apply_a64(const kn_rt__reloc *r, const char *name, char *errmsg,
                        size_t errmsg_size)
{
    uint64_t s = r->s, a = (uint64_t)r->a, p = r->p, v;
    unsigned shift;
    switch (r->type) {
    case R_AARCH64_NONE:
        return AT_OK;
    case R_AARCH64_ABS64:
        wr64(r->place, s + a);
        return AT_OK;
    case R_AARCH64_ABS32:
        v = s + a;
        if (!fits_either(v, 32))
            return overflow(r, name, v, errmsg, errmsg_size);
        wr32(r->place, v);
        return AT_OK;
    case R_AARCH64_ABS16:
        v = s + a;
        if (!fits_either(v, 16))
            return overflow(r, name, v, errmsg, errmsg_size);
        wr16(r->place, v);
        return AT_OK;
    case R_AARCH64_PREL64:
        wr64(r->place, s + a - p);
        return AT_OK;
    case R_AARCH64_PREL32:
        v = s + a - p;
        if (!fits_either(v, 32))
            return overflow(r, name, v, errmsg, errmsg_size);
        wr32(r->place, v);
        return AT_OK;
    case R_AARCH64_PREL16:
        v = s + a - p;
        if (!fits_either(v, 16))
            return overflow(r, name, v, errmsg, errmsg_size);
        wr16(r->place, v);
        return AT_OK;
    case R_AARCH64_MOVW_UABS_G0:
    case R_AARCH64_MOVW_UABS_G0_NC:
    case R_AARCH64_MOVW_UABS_G1:
    case R_AARCH64_MOVW_UABS_G1_NC:
    case R_AARCH64_MOVW_UABS_G2:
    case R_AARCH64_MOVW_UABS_G2_NC:
    case R_AARCH64_MOVW_UABS_G3: {
        static const struct {
            uint32_t type;
            unsigned shift;
            int check;
        } g[] = {{R_AARCH64_MOVW_UABS_G0, 0, 1},     {R_AARCH64_MOVW_UABS_G0_NC, 0, 0},
                 {R_AARCH64_MOVW_UABS_G1, 16, 1},    {R_AARCH64_MOVW_UABS_G1_NC, 16, 0},
                 {R_AARCH64_MOVW_UABS_G2, 32, 1},    {R_AARCH64_MOVW_UABS_G2_NC, 32, 0},
                 {R_AARCH64_MOVW_UABS_G3, 48, 0}};
        size_t i = 0;
        while (g[i].type != r->type)
            i++;
        v = s + a;
        if (g[i].check && (v >> g[i].shift) > 0xffffu)
            return overflow(r, name, v, errmsg, errmsg_size);
        patch(r->place, 0xffffu << 5, (uint32_t)((v >> g[i].shift) & 0xffffu) << 5);
        return AT_OK;
    }
    case R_AARCH64_LD_PREL_LO19:
    case R_AARCH64_CONDBR19:
        v = s + a - p;
        if (v & 3)
            return misaligned(r, name, v, errmsg, errmsg_size);
        if (!fits_signed(v, 21))
            return overflow(r, name, v, errmsg, errmsg_size);
        patch(r->place, 0x7ffffu << 5, (uint32_t)((v >> 2) & 0x7ffff) << 5);
        return AT_OK;
    case R_AARCH64_TSTBR14:
        v = s + a - p;
        if (v & 3)
            return misaligned(r, name, v, errmsg, errmsg_size);
        if (!fits_signed(v, 16))
            return overflow(r, name, v, errmsg, errmsg_size);
        patch(r->place, 0x3fffu << 5, (uint32_t)((v >> 2) & 0x3fff) << 5);
        return AT_OK;
    case R_AARCH64_JUMP26:
    case R_AARCH64_CALL26:
        v = s + a - p;
        if (v & 3)
            return misaligned(r, name, v, errmsg, errmsg_size);
        if (!fits_signed(v, 28))
            return overflow(r, name, v, errmsg, errmsg_size);
        patch(r->place, 0x3ffffffu, (uint32_t)((v >> 2) & 0x3ffffff));
        return AT_OK;
    case R_AARCH64_ADR_PREL_LO21:
        v = s + a - p;
        if (!fits_signed(v, 21))
            return overflow(r, name, v, errmsg, errmsg_size);
        patch_adr(r->place, v);
        return AT_OK;
    case R_AARCH64_ADR_PREL_PG_HI21:
    case R_AARCH64_ADR_PREL_PG_HI21_NC:
        v = page(s + a) - page(p);
        if (r->type == R_AARCH64_ADR_PREL_PG_HI21 && !fits_signed(v, 33))
            return overflow(r, name, v, errmsg, errmsg_size);
        patch_adr(r->place, (uint64_t)((int64_t)v >> 12));
        return AT_OK;
    case R_AARCH64_ADR_GOT_PAGE:
        v = page(r->got + a) - page(p);
        if (!fits_signed(v, 33))
            return overflow(r, name, v, errmsg, errmsg_size);
        patch_adr(r->place, (uint64_t)((int64_t)v >> 12));
        return AT_OK;
    case R_AARCH64_ADD_ABS_LO12_NC:
        v = s + a;
        patch(r->place, 0xfffu << 10, (uint32_t)(v & 0xfff) << 10);
        return AT_OK;
    case R_AARCH64_LDST8_ABS_LO12_NC:
    case R_AARCH64_LDST16_ABS_LO12_NC:
    case R_AARCH64_LDST32_ABS_LO12_NC:
    case R_AARCH64_LDST64_ABS_LO12_NC:
    case R_AARCH64_LDST128_ABS_LO12_NC:
        shift = r->type == R_AARCH64_LDST8_ABS_LO12_NC    ? 0
                : r->type == R_AARCH64_LDST16_ABS_LO12_NC ? 1
                : r->type == R_AARCH64_LDST32_ABS_LO12_NC ? 2
                : r->type == R_AARCH64_LDST64_ABS_LO12_NC ? 3
                                                          : 4;
        v = s + a;
        if (v & ((1u << shift) - 1))
            return misaligned(r, name, v, errmsg, errmsg_size);
        patch(r->place, 0xfffu << 10, (uint32_t)((v & 0xfff) >> shift) << 10);
        return AT_OK;
    case R_AARCH64_LD64_GOT_LO12_NC:
        v = r->got + a;
        if (v & 7)
            return misaligned(r, name, v, errmsg, errmsg_size);
        patch(r->place, 0xfffu << 10, (uint32_t)((v & 0xfff) >> 3) << 10);
        return AT_OK;
    case R_AARCH64_LD64_GOTPAGE_LO15:
        v = r->got + a - page(r->got_base);
        if (v & 7)
            return misaligned(r, name, v, errmsg, errmsg_size);
        if (v >= 0x8000)
            return overflow(r, name, v, errmsg, errmsg_size);
        patch(r->place, 0xfffu << 10, (uint32_t)(v >> 3) << 10);
        return AT_OK;
    default:
        break;
    }
    if (errmsg && errmsg_size)
        snprintf(errmsg, errmsg_size, "unsupported AArch64 relocation type %u", r->type);
    return AT_ELOAD;
}

at_err kn_rt__reloc_apply(uint16_t machine, const kn_rt__reloc *r, char *errmsg,
                          size_t errmsg_size)
{
    const char *name = kn_rt__reloc_name(machine, r->type);
    if (name == NULL) {
        if (errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size, "unsupported relocation type %u", r->type);
        return AT_ELOAD;
    }
    return machine == EM_X86_64 ? apply_x86(r, name, errmsg, errmsg_size)
                                : apply_a64(r, name, errmsg, errmsg_size);
}

/* ---- call stubs ------------------------------------------------------------------------ */

void kn_rt__stub_write(uint16_t machine, uint8_t *stub, uint64_t target)
{
    if (machine == EM_X86_64) {
        /* jmp *0(%rip); .quad target; int3 int3 */
        static const uint8_t jmp[6] = {0xff, 0x25, 0, 0, 0, 0};
        for (int i = 0; i < 6; i++)
            stub[i] = jmp[i];
        wr64(stub + 6, target);
        stub[14] = stub[15] = 0xcc;
    } else {
        /* ldr x16, 8; br x16; .quad target  (x16 is IP0, free for veneers) */
        wr32(stub, 0x58000050u);
        wr32(stub + 4, 0xd61f0200u);
        wr64(stub + 8, target);
    }
}
