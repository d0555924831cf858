/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Symbol look-up in the target's ELF files, and link-time address to file offset: a bounded
 * reader over a descriptor, for files the target controls.
 */
#ifndef __ELFSYM_H
#define __ELFSYM_H

#include <stdint.h>
#include <stddef.h>

/*
 * Caps on one file, checked against its headers before anything is read. Real ones are far
 * below: libtorch_cpu.so of torch 2.6 (Debian) has 30 sections, 12 segments, a 1 MiB .dynsym,
 * 3.2 MiB of names and a 15 MiB .eh_frame; a pip wheel's, built with more symbols exported,
 * some ten times that. Reading is not free (7 ms a MiB on the test VM, pages faulted in and
 * copied): the caps and the budget are what a hostile file can make one resolve cost.
 */
#define ELFSYM_MAX_FILE (16ull << 30)  /* st_size: libtorch_cuda.so is about 2 GiB */
#define ELFSYM_MAX_SECTIONS 1024       /* section headers */
#define ELFSYM_MAX_SEGMENTS 128	       /* program headers */
#define ELFSYM_MAX_SYMTAB (32u << 20)  /* one symbol table: 1.4 million symbols */
#define ELFSYM_MAX_STRTAB (96u << 20)  /* the names of one symbol table */
#define ELFSYM_MAX_SHSTRTAB (1u << 20) /* section names */
#define ELFSYM_MAX_SECTION (64u << 20) /* a section read whole (unwind tables) */

/*
 * What one resolve may read of the target's files, all of them together: bytes, and a
 * deadline checked before every read. Every elfsym opened with it charges it; once spent,
 * reads fail (-EFBIG for bytes, -ETIME for time) and nothing more is read.
 */
struct elfsym_budget {
	uint64_t bytes_left;
	uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0: none */
	uint64_t bytes_read;  /* what it paid for so far */
};

#define ELFSYM_BUDGET_BYTES (128ull << 20) /* a real resolve reads 5 MiB (torch 2.6) */
#define ELFSYM_BUDGET_MS 5000

/* A budget of bytes, and of ms milliseconds from now (0: no deadline). */
void elfsym__budget(struct elfsym_budget *b, uint64_t bytes, unsigned int ms);

struct elfsym;

/*
 * An ELF file open as fd (for reading; elfsym owns it from here on, also on failure). Regular
 * files only (-EISDIR, -EINVAL); the ELF, program and section headers are read and checked
 * here, symbol tables when first looked up. Reads are charged to b, shared with the other
 * files of one resolve; NULL: a budget of this file's own (ELFSYM_BUDGET_*). NULL + errno:
 * ENOEXEC (not a 64-bit little-endian ELF file, or headers out of the file), EFBIG (over a
 * cap or the budget), ETIME, EIO (the file got shorter while read).
 */
struct elfsym *elfsym__open_fd(int fd, struct elfsym_budget *b);
void elfsym__close(struct elfsym *e); /* accepts NULL */

/* The descriptor it reads (for a uprobe on exactly this file); valid until elfsym__close. */
int elfsym__fd(const struct elfsym *e);

/*
 * Link-time address of a defined symbol from .dynsym or .symtab; -ENOENT if absent, or the
 * errors above when a table cannot be read.
 */
int elfsym__find(struct elfsym *e, const char *name, uint64_t *addr);

/* Full name of the first defined symbol starting with prefix; -ENOENT if none fits in len. */
int elfsym__find_prefix(struct elfsym *e, const char *prefix, char *name, size_t len);

/*
 * Link-time address that the file's offset 0 is mapped at (first PT_LOAD):
 * runtime address = link-time address + (start of the offset-0 mapping - this).
 */
int elfsym__first_load(struct elfsym *e, uint64_t *vaddr);

/* The file offset of link-time address addr (in a PT_LOAD's file bytes): what a uprobe takes. */
int elfsym__file_offset(struct elfsym *e, uint64_t addr, uint64_t *off);

/*
 * Call fn for every defined symbol starting with prefix (.dynsym, then .symtab: a name
 * may come twice); a non-zero return stops the walk and is returned.
 */
typedef int (*elfsym_fn)(const char *name, uint64_t addr, void *ctx);
int elfsym__each(struct elfsym *e, const char *prefix, elfsym_fn fn, void *ctx);

/*
 * The section called name, read whole into a malloc'd *buf (the caller frees it) of *len
 * bytes, at link-time address *addr. At most max bytes (and ELFSYM_MAX_SECTION): -EFBIG past
 * that; -ENOENT if there is none with file contents.
 */
int elfsym__section(struct elfsym *e, const char *name, size_t max, void **buf, size_t *len,
		    uint64_t *addr);

/*
 * 0 if link-time address addr is where a function starts: the first address of an FDE in
 * .eh_frame_hdr's sorted table (stripped files keep it); -ENOENT if not, -ENOTSUP if the
 * table is missing or not in the encoding linkers write.
 */
int elfsym__function_start(struct elfsym *e, uint64_t addr);

/*
 * Where a C extension's method table (PyMethodDef: ml_name, ml_meth, ml_flags, ml_doc) holds the
 * entry for the method called name with ml_flags flags: the link-time addresses of such
 * entries, found by their ml_name pointing at name in .rodata (the word in .data.rel.ro or
 * .data, or its R_X86_64_RELATIVE relocation's addend). ml_meth may be filled only when the
 * library's initializers run: read it in the process. At most max entries go to defs; returns
 * how many were found (0: none), or a negative errno.
 */
int elfsym__method_defs(struct elfsym *e, const char *name, uint32_t flags, uint64_t *defs,
			size_t max);

/*
 * The file's GNU build-id (.note.gnu.build-id) as lower-case hex in hex (len >= 2 * 64 + 1):
 * 0, or -ENOENT if it has none, -EINVAL if the note is malformed or longer than 64 bytes.
 */
int elfsym__build_id(struct elfsym *e, char *hex, size_t len);

/* Bytes read from this file so far. */
uint64_t elfsym__bytes_read(const struct elfsym *e);

#endif /* __ELFSYM_H */
