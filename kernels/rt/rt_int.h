/* kernels/rt/rt_int.h -- declarations shared by the files of the kernel runtime
** (prefix kn_rt__).  Nothing outside kernels/rt/ includes this header.
**
**   rt_loader.c   ELF parsing, layout, symbol resolution, mapping (kn_rt_module_*)
**   rt_reloc.c    the x86-64 and AArch64 relocation formulas (both always compiled, so a
**                 warning in either is caught on any host; the loader picks the host's)
**   rt_symbols.c  the built-in symbol table (kn_rt_symbols)
**   rt_pool.c     the thread pool and the serial runtime
**   rt_time.c     kn_rt_time, kn_rt_flush
**   rt_fill.c     kn_rt_fill, kn_rt_rel_err, kn_rt_alloc/free, IEEE half conversion */
#ifndef KN_RT_INT_H
#define KN_RT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels_rt.h"

/* What one relocation needs from the loader.  All addresses are run-time addresses in
** the mapped image; 'place' points at the bytes to patch (inside the image, with at least
** kn_rt__reloc_width() bytes before the end of its section: the loader checked). */
typedef struct kn_rt__reloc {
    uint32_t type;
    uint8_t *place; /* where to patch */
    uint64_t p;     /* run-time address of 'place' */
    uint64_t s;     /* run-time address of the symbol (its call stub for external calls) */
    int64_t a;      /* addend */
    uint64_t got;   /* run-time address of the symbol's GOT slot (0 when it has none) */
    uint64_t got_base; /* start of the GOT (for GOT-relative x86 types) */
    uint64_t z;     /* the symbol's size (st_size) */
} kn_rt__reloc;

/* How the loader must prepare a relocation type, from kn_rt__reloc_kind(). */
enum {
    KN_RT__RK_UNKNOWN = 0, /* not supported: loading fails */
    KN_RT__RK_PLAIN = 1,   /* needs S only */
    KN_RT__RK_GOT = 2,     /* needs a GOT slot for the symbol */
    KN_RT__RK_BRANCH = 4,  /* a call or jump: an external symbol goes through a stub */
    KN_RT__RK_NONE = 8     /* does nothing (R_*_NONE) */
};

/* Kind of relocation 'type' on 'machine' (EM_X86_64 or EM_AARCH64), a KN_RT__RK_ mask. */
int kn_rt__reloc_kind(uint16_t machine, uint32_t type);
/* Bytes that relocation 'type' patches (1..8); 0 for unknown types. */
unsigned kn_rt__reloc_width(uint16_t machine, uint32_t type);
/* A printable name of the type ("R_X86_64_PC32"), or NULL when unknown. */
const char *kn_rt__reloc_name(uint16_t machine, uint32_t type);
/* Apply one relocation.  AT_OK, or AT_ELOAD with 'errmsg' saying why (overflow,
** misalignment, not an instruction the type expects). */
at_err kn_rt__reloc_apply(uint16_t machine, const kn_rt__reloc *r, char *errmsg,
                          size_t errmsg_size);

/* Size of one call stub in bytes, and writing one that jumps to 'target'. */
#define KN_RT__STUB_BYTES 16
void kn_rt__stub_write(uint16_t machine, uint8_t *stub, uint64_t target);

/* IEEE 754 binary16 <-> binary32, round to nearest even, NaN and infinities kept. */
float kn_rt__half_to_float(uint16_t h);
uint16_t kn_rt__float_to_half(float f);

#endif /* KN_RT_INT_H */
