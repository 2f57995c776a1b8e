/* kernels/rt/rt_loader.c -- a small loader for relocatable ELF objects (ET_REL) built
** for this machine: the kernels that LLVM (or gcc/clang in tests) emits.
**
** The object is outside data (it comes over the network): every header, offset, size,
** index and name is checked against the buffer before it is used, and a bad object is
** AT_ELOAD with a message, never a crash.  Steps, each a function below:
**
**   1. parse_headers   ELF header, section headers, section names, the symbol table
**   2. pick_sections   which sections are mapped: SHF_ALLOC ones, without .eh_frame
**   3. scan_symbols    where each symbol lives (section, absolute, common, undefined)
**   4. scan_relocs     validate every relocation that applies to a mapped section, and
**                      count the GOT slots and call stubs it needs
**   5. resolve         undefined symbols that relocations use: 'extra', then the
**                      built-in table; an unknown one is AT_ELOAD naming it
**                      (_GLOBAL_OFFSET_TABLE_, which large-code-model objects use, is
**                      the loader's own GOT)
**   6. layout, map     one anonymous mapping:
**                        [ code sections | call stubs ]   R-X after loading
**                        [ read-only sections | GOT ]    R   after loading
**                        [ writable sections | .bss | common symbols ]  RW
**                      each part page-aligned, sections aligned as they ask.  Because the
**                      GOT and the stubs are inside the image, every PC-relative field
**                      that points into it is in range whatever address mmap returns, and
**                      a call to a far libm function goes through a stub (an absolute
**                      jump), so the small code model's +-2 GiB / +-128 MiB limits hold.
**   7. apply           the relocations (rt_reloc.c), then protections and, on AArch64,
**                      the instruction cache flush.
**
** The object's bytes are only read during kn_rt_module_load; the module keeps copies of
** the names of its exported symbols. */
#include "rt_int.h"

#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#else
#define HOST_MACHINE 0 /* no loader for this host: every load fails cleanly */
#endif

/* The largest image we map; far above any kernel, and well inside the reach of the
** PC-relative fields that point from code into data (x86-64 +-2 GiB). */
#define MAX_IMAGE_BYTES ((uint64_t)256 << 20)

enum { REG_TEXT, REG_RO, REG_RW };

enum sym_state {
    SYM_NONE,        /* index 0, or an STT_FILE: address 0 */
    SYM_SECTION,     /* defined in a mapped section: image + section offset + value */
    SYM_ABS,         /* absolute value */
    SYM_COMMON,      /* common symbol: space allocated in the writable part */
    SYM_UNDEF,       /* undefined: resolved from the tables when a relocation uses it */
    SYM_GOT_BASE,    /* _GLOBAL_OFFSET_TABLE_: the start of our GOT (large code model) */
    SYM_UNMAPPED,    /* defined in a section that is not mapped (debug, .eh_frame) */
    SYM_UNSUPPORTED  /* TLS, IFUNC, extended section index: fails if used */
};

typedef struct sec_info {
    int load;      /* mapped? */
    int region;    /* REG_* */
    uint64_t off;  /* offset of the section in the image */
    const char *name;
} sec_info;

typedef struct sym_info {
    int state;
    int used;      /* some applied relocation refers to it */
    int32_t got;   /* GOT slot, or -1 */
    int32_t stub;  /* call stub, or -1 */
    uint64_t off;  /* SYM_COMMON: offset in the image */
    uint64_t addr; /* run-time address once resolved */
    const char *name;
} sym_info;

typedef struct loader {
    const uint8_t *obj;
    size_t n;
    uint16_t machine;
    const kn_rt_symbol *extra;
    char *errmsg;
    size_t errmsg_size;

    Elf64_Shdr *sh; /* copies of the section headers (aligned) */
    size_t shnum;
    sec_info *sec;
    const char *shstr;
    size_t shstr_n;

    size_t symtab; /* section index of SHT_SYMTAB, 0 if none */
    Elf64_Sym *syms;
    size_t nsyms;
    sym_info *si;
    const char *str;
    size_t str_n;

    size_t n_got, n_stub;
    uint64_t stub_off, got_off, text_end, ro_end, image_bytes;
    uint8_t *image;
} loader;

struct kn_rt_module {
    uint8_t *image;
    size_t image_bytes;
    size_t n_syms;
    kn_rt_symbol *syms; /* names point into the same allocation */
};

static at_err fail(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static at_err fail(loader *L, const char *fmt, ...)
{
    va_list ap;
    if (L->errmsg && L->errmsg_size) {
        int k = snprintf(L->errmsg, L->errmsg_size, "ELF object: ");
        if (k > 0 && (size_t)k < L->errmsg_size) {
            va_start(ap, fmt);
            vsnprintf(L->errmsg + k, L->errmsg_size - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return AT_ELOAD;
}

static at_err oom(loader *L)
{
    if (L->errmsg && L->errmsg_size)
        snprintf(L->errmsg, L->errmsg_size, "ELF object: out of memory");
    return AT_ENOMEM;
}

/* [off, off + size) lies inside the object. */
static int in_obj(const loader *L, uint64_t off, uint64_t size)
{
    return off <= L->n && size <= L->n - off;
}

/* The NUL-terminated string at 'off' of a string table, or NULL when 'off' is outside
** it or no NUL ends the string inside it. */
static const char *str_at(const char *tab, size_t n, uint64_t off)
{
    if (tab == NULL || off >= n || memchr(tab + off, 0, n - off) == NULL)
        return NULL;
    return tab + off;
}

static const char *machine_name(unsigned m)
{
    switch (m) {
    case EM_X86_64:
        return "x86-64";
    case EM_AARCH64:
        return "AArch64";
    case EM_386:
        return "i386";
    case EM_ARM:
        return "ARM (32-bit)";
    case EM_RISCV:
        return "RISC-V";
    case EM_PPC64:
        return "PowerPC64";
    default:
        return "another machine";
    }
}

static int is_pow2(uint64_t x)
{
    return x && (x & (x - 1)) == 0;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) & ~(a - 1);
}

/* ---- 1. headers ------------------------------------------------------------------------ */

static at_err parse_headers(loader *L)
{
    Elf64_Ehdr eh;
    Elf64_Shdr sh0;
    uint64_t shnum, shstrndx;

    if (L->n < sizeof eh)
        return fail(L, "%zu bytes is too small for an ELF header", L->n);
    memcpy(&eh, L->obj, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
        return fail(L, "not an ELF file (bad magic)");
    if (eh.e_ident[EI_CLASS] != ELFCLASS64)
        return fail(L, "not a 64-bit ELF object (class %u)", eh.e_ident[EI_CLASS]);
    if (eh.e_ident[EI_DATA] != ELFDATA2LSB)
        return fail(L, "not a little-endian ELF object");
    if (eh.e_ident[EI_VERSION] != EV_CURRENT || eh.e_version != EV_CURRENT)
        return fail(L, "unknown ELF version");
    if (eh.e_type != ET_REL)
        return fail(L, "not a relocatable object (e_type %u; want ET_REL, from 'cc -c')",
                    eh.e_type);
    if (HOST_MACHINE == 0)
        return fail(L, "this host has no kernel loader (only x86-64 and AArch64)");
    if (eh.e_machine != HOST_MACHINE)
        return fail(L, "object is for %s (e_machine %u), this host is %s",
                    machine_name(eh.e_machine), eh.e_machine, machine_name(HOST_MACHINE));
    L->machine = eh.e_machine;
    if (eh.e_shentsize != sizeof(Elf64_Shdr))
        return fail(L, "section header size %u, expected %zu", eh.e_shentsize,
                    sizeof(Elf64_Shdr));
    if (eh.e_shoff == 0 || !in_obj(L, eh.e_shoff, sizeof sh0))
        return fail(L, "section header table offset 0x%llx is outside the object",
                    (unsigned long long)eh.e_shoff);
    memcpy(&sh0, L->obj + eh.e_shoff, sizeof sh0);
    shnum = eh.e_shnum ? eh.e_shnum : sh0.sh_size;             /* extended numbering */
    shstrndx = eh.e_shstrndx == SHN_XINDEX ? sh0.sh_link : eh.e_shstrndx;
    if (shnum == 0 || shnum > (L->n - eh.e_shoff) / sizeof(Elf64_Shdr))
        return fail(L, "section header table (%llu entries at 0x%llx) does not fit in "
                       "the object",
                    (unsigned long long)shnum, (unsigned long long)eh.e_shoff);
    L->shnum = (size_t)shnum;
    if ((L->sh = at_malloc(L->shnum * sizeof *L->sh)) == NULL ||
        (L->sec = at_calloc(L->shnum, sizeof *L->sec)) == NULL)
        return oom(L);
    memcpy(L->sh, L->obj + eh.e_shoff, L->shnum * sizeof *L->sh);

    for (size_t i = 1; i < L->shnum; i++) {
        const Elf64_Shdr *s = &L->sh[i];
        if (s->sh_type != SHT_NOBITS && s->sh_type != SHT_NULL &&
            !in_obj(L, s->sh_offset, s->sh_size))
            return fail(L, "section %zu (offset 0x%llx, size 0x%llx) lies outside the "
                           "object of %zu bytes",
                        i, (unsigned long long)s->sh_offset, (unsigned long long)s->sh_size,
                        L->n);
        if (s->sh_addralign > 1 && !is_pow2(s->sh_addralign))
            return fail(L, "section %zu: alignment %llu is not a power of two", i,
                        (unsigned long long)s->sh_addralign);
    }
    if (shstrndx == 0 || shstrndx >= L->shnum || L->sh[shstrndx].sh_type != SHT_STRTAB)
        return fail(L, "bad section name table index %llu", (unsigned long long)shstrndx);
    L->shstr = (const char *)L->obj + L->sh[shstrndx].sh_offset;
    L->shstr_n = (size_t)L->sh[shstrndx].sh_size;
    L->sec[0].name = "";
    for (size_t i = 1; i < L->shnum; i++) {
        if ((L->sec[i].name = str_at(L->shstr, L->shstr_n, L->sh[i].sh_name)) == NULL)
            return fail(L, "section %zu: name offset %u is outside the name table", i,
                        L->sh[i].sh_name);
    }

    for (size_t i = 1; i < L->shnum; i++) {
        const Elf64_Shdr *s = &L->sh[i];
        if (s->sh_type != SHT_SYMTAB)
            continue;
        if (L->symtab)
            return fail(L, "more than one symbol table");
        if (s->sh_entsize != sizeof(Elf64_Sym) || s->sh_size % sizeof(Elf64_Sym))
            return fail(L, "symbol table %s: entry size %llu, size %llu", L->sec[i].name,
                        (unsigned long long)s->sh_entsize, (unsigned long long)s->sh_size);
        if (s->sh_link == 0 || s->sh_link >= L->shnum ||
            L->sh[s->sh_link].sh_type != SHT_STRTAB)
            return fail(L, "symbol table %s: bad string table index %u", L->sec[i].name,
                        s->sh_link);
        L->symtab = i;
    }
    if (L->symtab) {
        const Elf64_Shdr *s = &L->sh[L->symtab], *st = &L->sh[s->sh_link];
        L->nsyms = (size_t)(s->sh_size / sizeof(Elf64_Sym));
        L->str = (const char *)L->obj + st->sh_offset;
        L->str_n = (size_t)st->sh_size;
        if (L->nsyms) {
            if ((L->syms = at_malloc(L->nsyms * sizeof *L->syms)) == NULL)
                return oom(L);
            memcpy(L->syms, L->obj + s->sh_offset, L->nsyms * sizeof *L->syms);
        }
    }
    if ((L->si = at_calloc(L->nsyms ? L->nsyms : 1, sizeof *L->si)) == NULL)
        return oom(L);
    return AT_OK;
}

/* ---- 2. sections ----------------------------------------------------------------------- */

static at_err pick_sections(loader *L, uint64_t page)
{
    for (size_t i = 1; i < L->shnum; i++) {
        const Elf64_Shdr *s = &L->sh[i];
        sec_info *si = &L->sec[i];
        if (!(s->sh_flags & SHF_ALLOC))
            continue;
        switch (s->sh_type) {
        case SHT_PROGBITS:
        case SHT_NOBITS:
        case SHT_NOTE:
        case SHT_INIT_ARRAY:
        case SHT_FINI_ARRAY:
        case SHT_PREINIT_ARRAY:
            break;
        default:
            continue; /* unwind tables (SHT_X86_64_UNWIND) and other metadata */
        }
        if (strcmp(si->name, ".eh_frame") == 0)
            continue;
        if (s->sh_flags & SHF_TLS)
            return fail(L, "section %s: thread-local storage is not supported", si->name);
        if ((s->sh_flags & SHF_EXECINSTR) && (s->sh_flags & SHF_WRITE))
            return fail(L, "section %s is both writable and executable", si->name);
        if (s->sh_addralign > page)
            return fail(L, "section %s: alignment %llu is larger than a page", si->name,
                        (unsigned long long)s->sh_addralign);
        if (s->sh_size > MAX_IMAGE_BYTES)
            return fail(L, "section %s: size %llu is too large", si->name,
                        (unsigned long long)s->sh_size);
        si->load = 1;
        si->region = (s->sh_flags & SHF_EXECINSTR) ? REG_TEXT
                     : (s->sh_flags & SHF_WRITE)   ? REG_RW
                                                   : REG_RO;
    }
    return AT_OK;
}

/* ---- 3. symbols ------------------------------------------------------------------------ */

static at_err scan_symbols(loader *L, uint64_t page)
{
    for (size_t i = 1; i < L->nsyms; i++) {
        const Elf64_Sym *s = &L->syms[i];
        sym_info *si = &L->si[i];
        unsigned type = ELF64_ST_TYPE(s->st_info);
        si->got = si->stub = -1;
        if ((si->name = str_at(L->str, L->str_n, s->st_name)) == NULL)
            return fail(L, "symbol %zu: name offset %u is outside the string table", i,
                        s->st_name);
        if (type == STT_TLS || type == STT_GNU_IFUNC) {
            si->state = SYM_UNSUPPORTED;
            continue;
        }
        if (type == STT_FILE) {
            si->state = SYM_NONE;
            continue;
        }
        switch (s->st_shndx) {
        case SHN_UNDEF:
            si->state = strcmp(si->name, "_GLOBAL_OFFSET_TABLE_") == 0 ? SYM_GOT_BASE
                                                                       : SYM_UNDEF;
            break;
        case SHN_ABS:
            si->state = SYM_ABS;
            si->addr = s->st_value;
            break;
        case SHN_COMMON:
            if (s->st_value > page || (s->st_value > 1 && !is_pow2(s->st_value)))
                return fail(L, "common symbol '%s': bad alignment %llu", si->name,
                            (unsigned long long)s->st_value);
            if (s->st_size > MAX_IMAGE_BYTES)
                return fail(L, "common symbol '%s': size %llu is too large", si->name,
                            (unsigned long long)s->st_size);
            si->state = SYM_COMMON;
            break;
        default:
            if (s->st_shndx >= SHN_LORESERVE) {
                si->state = SYM_UNSUPPORTED; /* SHN_XINDEX and friends */
            } else if (s->st_shndx >= L->shnum) {
                return fail(L, "symbol '%s': section index %u out of range (%zu sections)",
                            si->name, s->st_shndx, L->shnum);
            } else if (!L->sec[s->st_shndx].load) {
                si->state = SYM_UNMAPPED;
            } else {
                if (s->st_value > L->sh[s->st_shndx].sh_size)
                    return fail(L, "symbol '%s': value 0x%llx is past the end of section %s",
                                si->name, (unsigned long long)s->st_value,
                                L->sec[s->st_shndx].name);
                si->state = SYM_SECTION;
            }
            break;
        }
    }
    return AT_OK;
}

/* ---- 4. relocations -------------------------------------------------------------------- */

/* The relocation section 'i' applies to a mapped section: check its header.  Returns 1
** when it applies, 0 when it is to be skipped, -1 after fail(). */
static int reloc_section(loader *L, size_t i, at_err *err)
{
    const Elf64_Shdr *s = &L->sh[i];
    if (s->sh_type != SHT_RELA && s->sh_type != SHT_REL)
        return 0;
    if (s->sh_info == 0 || s->sh_info >= L->shnum || !L->sec[s->sh_info].load)
        return 0; /* .rela.eh_frame, .rela.debug_*: not mapped, not applied */
    if (s->sh_type == SHT_REL) {
        *err = fail(L, "%s: SHT_REL relocations are not used on x86-64/AArch64",
                    L->sec[i].name);
        return -1;
    }
    if (s->sh_entsize != sizeof(Elf64_Rela) || s->sh_size % sizeof(Elf64_Rela)) {
        *err = fail(L, "%s: entry size %llu, size %llu", L->sec[i].name,
                    (unsigned long long)s->sh_entsize, (unsigned long long)s->sh_size);
        return -1;
    }
    if (L->symtab == 0 || s->sh_link != L->symtab) {
        *err = fail(L, "%s: symbol table index %u is not the symbol table", L->sec[i].name,
                    s->sh_link);
        return -1;
    }
    if (L->sh[s->sh_info].sh_type == SHT_NOBITS) {
        *err = fail(L, "%s: relocates %s, which has no contents", L->sec[i].name,
                    L->sec[s->sh_info].name);
        return -1;
    }
    return 1;
}

static at_err scan_relocs(loader *L)
{
    at_err err = AT_OK;
    for (size_t i = 1; i < L->shnum; i++) {
        int r = reloc_section(L, i, &err);
        const Elf64_Shdr *s = &L->sh[i], *t;
        size_t n;
        if (r < 0)
            return err;
        if (r == 0)
            continue;
        t = &L->sh[s->sh_info];
        n = (size_t)(s->sh_size / sizeof(Elf64_Rela));
        for (size_t k = 0; k < n; k++) {
            Elf64_Rela ra;
            uint32_t type, sym;
            unsigned width;
            int kind;
            sym_info *si;
            memcpy(&ra, L->obj + s->sh_offset + k * sizeof ra, sizeof ra);
            type = (uint32_t)ELF64_R_TYPE(ra.r_info);
            sym = (uint32_t)ELF64_R_SYM(ra.r_info);
            kind = kn_rt__reloc_kind(L->machine, type);
            if (kind == KN_RT__RK_UNKNOWN)
                return fail(L, "%s[%zu]: unsupported relocation type %u", L->sec[i].name, k,
                            type);
            if (kind == KN_RT__RK_NONE)
                continue;
            width = kn_rt__reloc_width(L->machine, type);
            if (ra.r_offset > t->sh_size || width > t->sh_size - ra.r_offset)
                return fail(L, "%s[%zu]: offset 0x%llx is outside section %s (0x%llx bytes)",
                            L->sec[i].name, k, (unsigned long long)ra.r_offset,
                            L->sec[s->sh_info].name, (unsigned long long)t->sh_size);
            if (sym >= L->nsyms)
                return fail(L, "%s[%zu]: symbol index %u out of range (%zu symbols)",
                            L->sec[i].name, k, sym, L->nsyms);
            if (sym == 0 && (kind & KN_RT__RK_GOT))
                return fail(L, "%s[%zu]: GOT relocation without a symbol", L->sec[i].name, k);
            if (sym == 0)
                continue; /* no symbol: S is 0 */
            si = &L->si[sym];
            si->used = 1;
            if ((kind & KN_RT__RK_GOT) && L->machine == EM_AARCH64 && ra.r_addend != 0)
                return fail(L, "%s[%zu]: GOT relocation with an addend", L->sec[i].name, k);
            if ((kind & KN_RT__RK_GOT) && si->got < 0)
                si->got = (int32_t)L->n_got++;
            if ((kind & KN_RT__RK_BRANCH) && si->state == SYM_UNDEF && si->stub < 0)
                si->stub = (int32_t)L->n_stub++;
        }
    }
    return AT_OK;
}

/* ---- 5. resolution --------------------------------------------------------------------- */

static void *lookup(const kn_rt_symbol *tab, const char *name, int *found)
{
    for (; tab && tab->name; tab++) {
        if (strcmp(tab->name, name) == 0) {
            *found = 1;
            return tab->addr;
        }
    }
    return NULL;
}

static at_err resolve(loader *L)
{
    for (size_t i = 1; i < L->nsyms; i++) {
        sym_info *si = &L->si[i];
        int found = 0;
        void *addr;
        if (!si->used)
            continue;
        switch (si->state) {
        case SYM_UNDEF:
            addr = lookup(L->extra, si->name, &found);
            if (!found)
                addr = lookup(kn_rt_symbols(), si->name, &found);
            if (!found && ELF64_ST_BIND(L->syms[i].st_info) != STB_WEAK)
                return fail(L, "unresolved symbol '%s' (a kernel may call only mem* and "
                               "the libm functions of kn_rt_symbols())",
                            si->name);
            si->addr = (uint64_t)(uintptr_t)addr; /* an unresolved weak symbol is 0 */
            break;
        case SYM_UNMAPPED:
            return fail(L, "a relocation refers to '%s' in section %s, which is not loaded",
                        si->name, L->sec[L->syms[i].st_shndx].name);
        case SYM_UNSUPPORTED:
            return fail(L, "symbol '%s': thread-local, ifunc or extended-index symbols are "
                           "not supported",
                        si->name);
        default:
            break;
        }
    }
    return AT_OK;
}

/* ---- 6. layout and mapping ------------------------------------------------------------- */

/* Place 'size' bytes aligned to 'align' at *cur; fails past MAX_IMAGE_BYTES. */
static at_err place(loader *L, uint64_t *cur, uint64_t size, uint64_t align, uint64_t *off)
{
    uint64_t at = align_up(*cur, align > 1 ? align : 1);
    if (at > MAX_IMAGE_BYTES || size > MAX_IMAGE_BYTES - at)
        return fail(L, "the image would be larger than %llu bytes",
                    (unsigned long long)MAX_IMAGE_BYTES);
    *off = at;
    *cur = at + size;
    return AT_OK;
}

static at_err place_region(loader *L, int region, uint64_t *cur)
{
    at_err err;
    /* contents first, zero-filled sections after them */
    for (int nobits = 0; nobits < 2; nobits++) {
        for (size_t i = 1; i < L->shnum; i++) {
            if (!L->sec[i].load || L->sec[i].region != region ||
                (L->sh[i].sh_type == SHT_NOBITS) != nobits)
                continue;
            if ((err = place(L, cur, L->sh[i].sh_size, L->sh[i].sh_addralign,
                             &L->sec[i].off)) != AT_OK)
                return err;
        }
    }
    return AT_OK;
}

static at_err layout(loader *L, uint64_t page)
{
    uint64_t cur = 0, unused;
    at_err err;
    if ((err = place_region(L, REG_TEXT, &cur)) != AT_OK ||
        (err = place(L, &cur, (uint64_t)L->n_stub * KN_RT__STUB_BYTES, 16, &L->stub_off)) !=
            AT_OK ||
        (err = place(L, &cur, 0, page, &L->text_end)) != AT_OK ||
        (err = place_region(L, REG_RO, &cur)) != AT_OK ||
        (err = place(L, &cur, (uint64_t)L->n_got * 8, 8, &L->got_off)) != AT_OK ||
        (err = place(L, &cur, 0, page, &L->ro_end)) != AT_OK ||
        (err = place_region(L, REG_RW, &cur)) != AT_OK)
        return err;
    for (size_t i = 1; i < L->nsyms; i++) {
        const Elf64_Sym *s = &L->syms[i];
        if (L->si[i].state == SYM_COMMON &&
            (err = place(L, &cur, s->st_size, s->st_value, &L->si[i].off)) != AT_OK)
            return err;
    }
    if ((err = place(L, &cur, 0, page, &unused)) != AT_OK)
        return err;
    L->image_bytes = cur ? cur : page; /* never an empty mapping */
    return AT_OK;
}

static at_err map_image(loader *L)
{
    uint64_t base;
    void *p = mmap(NULL, (size_t)L->image_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        if (L->errmsg && L->errmsg_size)
            snprintf(L->errmsg, L->errmsg_size, "ELF object: mmap of %llu bytes: %s",
                     (unsigned long long)L->image_bytes, strerror(errno));
        return AT_ENOMEM;
    }
    L->image = p;
    base = (uint64_t)(uintptr_t)p;
    for (size_t i = 1; i < L->shnum; i++) {
        if (L->sec[i].load && L->sh[i].sh_type != SHT_NOBITS)
            memcpy(L->image + L->sec[i].off, L->obj + L->sh[i].sh_offset,
                   (size_t)L->sh[i].sh_size);
    }
    for (size_t i = 1; i < L->nsyms; i++) {
        sym_info *si = &L->si[i];
        if (si->state == SYM_SECTION)
            si->addr = base + L->sec[L->syms[i].st_shndx].off + L->syms[i].st_value;
        else if (si->state == SYM_COMMON)
            si->addr = base + si->off;
        else if (si->state == SYM_GOT_BASE)
            si->addr = base + L->got_off;
        if (si->got >= 0) {
            uint64_t v = si->addr;
            memcpy(L->image + L->got_off + 8 * (uint64_t)si->got, &v, 8);
        }
        if (si->stub >= 0)
            kn_rt__stub_write(L->machine,
                              L->image + L->stub_off + KN_RT__STUB_BYTES * (uint64_t)si->stub,
                              si->addr);
    }
    return AT_OK;
}

/* ---- 7. relocation and protection ------------------------------------------------------ */

static at_err apply_relocs(loader *L)
{
    uint64_t base = (uint64_t)(uintptr_t)L->image;
    at_err err = AT_OK;
    for (size_t i = 1; i < L->shnum; i++) {
        const Elf64_Shdr *s = &L->sh[i];
        size_t n, tsec;
        if (reloc_section(L, i, &err) <= 0)
            continue; /* checked by scan_relocs */
        tsec = s->sh_info;
        n = (size_t)(s->sh_size / sizeof(Elf64_Rela));
        for (size_t k = 0; k < n; k++) {
            Elf64_Rela ra;
            kn_rt__reloc r;
            const sym_info *si;
            uint32_t sym;
            char why[200];
            memcpy(&ra, L->obj + s->sh_offset + k * sizeof ra, sizeof ra);
            sym = (uint32_t)ELF64_R_SYM(ra.r_info);
            r.type = (uint32_t)ELF64_R_TYPE(ra.r_info);
            if (kn_rt__reloc_kind(L->machine, r.type) == KN_RT__RK_NONE)
                continue;
            si = sym ? &L->si[sym] : NULL;
            r.place = L->image + L->sec[tsec].off + ra.r_offset;
            r.p = base + L->sec[tsec].off + ra.r_offset;
            r.s = si ? si->addr : 0;
            if (si && si->stub >= 0 &&
                (kn_rt__reloc_kind(L->machine, r.type) & KN_RT__RK_BRANCH))
                r.s = base + L->stub_off + KN_RT__STUB_BYTES * (uint64_t)si->stub;
            r.a = ra.r_addend;
            r.got = si && si->got >= 0 ? base + L->got_off + 8 * (uint64_t)si->got : 0;
            r.got_base = base + L->got_off;
            r.z = sym ? L->syms[sym].st_size : 0;
            if (kn_rt__reloc_apply(L->machine, &r, why, sizeof why) != AT_OK)
                return fail(L, "%s[%zu] (offset 0x%llx in %s, symbol '%s'): %s",
                            L->sec[i].name, k, (unsigned long long)ra.r_offset,
                            L->sec[tsec].name, si ? si->name : "", why);
        }
    }
    return AT_OK;
}

static at_err protect(loader *L)
{
    if (L->text_end && mprotect(L->image, (size_t)L->text_end, PROT_READ | PROT_EXEC) != 0)
        return fail(L, "mprotect(R-X): %s", strerror(errno));
    if (L->ro_end > L->text_end &&
        mprotect(L->image + L->text_end, (size_t)(L->ro_end - L->text_end), PROT_READ) != 0)
        return fail(L, "mprotect(R): %s", strerror(errno));
    if (L->text_end)
        __builtin___clear_cache((char *)L->image, (char *)L->image + L->text_end);
    return AT_OK;
}

/* The defined global and weak symbols, with copies of their names. */
static at_err export_symbols(loader *L, kn_rt_module *m)
{
    size_t n = 0, names = 0;
    char *dst;
    for (size_t i = 1; i < L->nsyms; i++) {
        const sym_info *si = &L->si[i];
        unsigned bind = ELF64_ST_BIND(L->syms[i].st_info);
        if ((bind == STB_GLOBAL || bind == STB_WEAK) && si->name[0] &&
            (si->state == SYM_SECTION || si->state == SYM_COMMON || si->state == SYM_ABS)) {
            n++;
            names += strlen(si->name) + 1;
        }
    }
    if ((m->syms = at_malloc(n * sizeof *m->syms + names + 1)) == NULL)
        return oom(L);
    dst = (char *)(m->syms + n);
    for (size_t i = 1; i < L->nsyms; i++) {
        const sym_info *si = &L->si[i];
        unsigned bind = ELF64_ST_BIND(L->syms[i].st_info);
        size_t len;
        if (!((bind == STB_GLOBAL || bind == STB_WEAK) && si->name[0] &&
              (si->state == SYM_SECTION || si->state == SYM_COMMON || si->state == SYM_ABS)))
            continue;
        len = strlen(si->name) + 1;
        memcpy(dst, si->name, len);
        m->syms[m->n_syms].name = dst;
        m->syms[m->n_syms].addr = (void *)(uintptr_t)si->addr;
        m->n_syms++;
        dst += len;
    }
    return AT_OK;
}

at_err kn_rt_module_load(const void *obj, size_t n_bytes, const kn_rt_symbol *extra,
                         kn_rt_module **out, char *errmsg, size_t errmsg_size)
{
    loader L;
    kn_rt_module *m = NULL;
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t page = pg > 0 && is_pow2((uint64_t)pg) ? (uint64_t)pg : 4096;
    at_err err;

    if (out)
        *out = NULL;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    memset(&L, 0, sizeof L);
    L.obj = obj;
    L.n = n_bytes;
    L.extra = extra;
    L.errmsg = errmsg;
    L.errmsg_size = errmsg_size;
    if (out == NULL)
        return AT_EINVAL;
    if (obj == NULL) {
        err = fail(&L, "no object bytes");
        goto done;
    }
    if ((err = parse_headers(&L)) != AT_OK || (err = pick_sections(&L, page)) != AT_OK ||
        (err = scan_symbols(&L, page)) != AT_OK || (err = scan_relocs(&L)) != AT_OK ||
        (err = resolve(&L)) != AT_OK || (err = layout(&L, page)) != AT_OK ||
        (err = map_image(&L)) != AT_OK || (err = apply_relocs(&L)) != AT_OK)
        goto done;
    if ((m = at_calloc(1, sizeof *m)) == NULL) {
        err = oom(&L);
        goto done;
    }
    if ((err = export_symbols(&L, m)) != AT_OK || (err = protect(&L)) != AT_OK)
        goto done;
    m->image = L.image;
    m->image_bytes = (size_t)L.image_bytes;
    L.image = NULL;
    *out = m;
    m = NULL;
done:
    if (m) {
        at_free(m->syms);
        at_free(m);
    }
    if (L.image)
        munmap(L.image, (size_t)L.image_bytes);
    at_free(L.si);
    at_free(L.syms);
    at_free(L.sec);
    at_free(L.sh);
    return err;
}

void *kn_rt_module_sym(const kn_rt_module *m, const char *name)
{
    if (m == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < m->n_syms; i++)
        if (strcmp(m->syms[i].name, name) == 0)
            return m->syms[i].addr;
    return NULL;
}

void kn_rt_module_free(kn_rt_module *m)
{
    if (m == NULL)
        return;
    munmap(m->image, m->image_bytes);
    at_free(m->syms);
    at_free(m);
}
