// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Symbol look-up in the target's ELF files, which the target's user may have written to hurt
 * the daemon. Read with pread, never mapped (a file truncated under a mapping raises SIGBUS in
 * whoever touches it); only the headers, the symbol table looked in and its names, or a
 * section asked for by name, each checked against the file's size and the caps of elfsym.h
 * before it is read (and for holes: a sparse table costs its maker nothing), and charged to
 * the resolve's budget. A file that gets shorter while it is read is an error (-EIO). Files
 * are never executed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SEEK_HOLE, SEEK_DATA */
#endif
#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "resolve/elfsym.h"

#define READ_CHUNK (4u << 20)  /* the deadline is looked at between chunks */
#define HOLE_CHECK (64u << 10) /* tables from this size on are looked at for holes */

enum {
	TAB_DYNSYM,
	TAB_SYMTAB,
	NTABS
};

struct symtab {
	Elf64_Sym *sym;
	size_t n;
	char *str; /* strsz bytes and a NUL */
	size_t strsz;
	int state; /* 0: not read yet, 1: read (or absent), negative: the errno it failed with */
};

struct elfsym {
	int fd;
	uint64_t size; /* st_size when opened */
	Elf64_Ehdr eh;
	Elf64_Phdr *ph;
	size_t phnum;
	Elf64_Shdr *sh;
	size_t shnum;
	char *shstr; /* section names, NUL after the last */
	size_t shstrsz;
	int shstr_state;
	struct symtab tab[NTABS];
	struct elfsym_budget own, *b;
	uint64_t bytes_read;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

void elfsym__budget(struct elfsym_budget *b, uint64_t bytes, unsigned int ms)
{
	b->bytes_left = bytes;
	b->deadline_ns = ms ? now_ns() + ms * 1000000ull : 0;
	b->bytes_read = 0;
}

static int in_file(const struct elfsym *e, uint64_t off, uint64_t len)
{
	return off <= e->size && len <= e->size - off;
}

/* len bytes at off, which the headers put inside the file; the budget pays for them. */
static int read_at(struct elfsym *e, void *buf, size_t len, uint64_t off)
{
	struct elfsym_budget *b = e->b;
	size_t done = 0;

	if (!in_file(e, off, len))
		return -ENOEXEC;
	if (len > b->bytes_left)
		return -EFBIG;
	while (done < len) {
		size_t chunk = len - done < READ_CHUNK ? len - done : READ_CHUNK;
		ssize_t r;

		if (b->deadline_ns && now_ns() > b->deadline_ns)
			return -ETIME;
		r = pread(e->fd, (char *)buf + done, chunk, off + done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO; /* shorter than when opened: it changed while read */
		done += r;
		b->bytes_left -= r;
		b->bytes_read += r;
		e->bytes_read += r;
	}
	return 0;
}

/*
 * [off, off + len) must have no hole: a linker writes every byte of a table, so a hole is a
 * sparse file made to cost the reader, not the writer, refused before it is read (-ENOEXEC).
 * The hole at the end of a file cut since it was opened is that change (-EIO). Where holes are
 * not known (the file system reports none), every file passes.
 */
static int check_dense(const struct elfsym *e, uint64_t off, size_t len)
{
	struct stat st;
	off_t hole;

	if (len < HOLE_CHECK)
		return 0;
	hole = lseek(e->fd, off, SEEK_HOLE);
	if (hole < 0 || (uint64_t)hole >= off + len)
		return 0;
	return !fstat(e->fd, &st) && (uint64_t)st.st_size < off + len ? -EIO : -ENOEXEC;
}

/* A malloc'd copy of len bytes at off, with a NUL after them. */
static int read_alloc(struct elfsym *e, void **out, size_t len, uint64_t off)
{
	char *buf;
	int ret;

	if (!in_file(e, off, len))
		return -ENOEXEC;
	ret = check_dense(e, off, len);
	if (ret)
		return ret;
	buf = malloc(len + 1);
	if (!buf)
		return -ENOMEM;
	ret = read_at(e, buf, len, off);
	if (ret) {
		free(buf);
		return ret;
	}
	buf[len] = 0;
	*out = buf;
	return 0;
}

static int check_ident(const Elf64_Ehdr *eh)
{
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_ident[EI_DATA] != ELFDATA2LSB || eh->e_ident[EI_VERSION] != EV_CURRENT ||
	    (eh->e_type != ET_EXEC && eh->e_type != ET_DYN))
		return -ENOEXEC;
	return 0;
}

/* The program headers, then the section headers; extended numbering is no real library's. */
static int read_headers(struct elfsym *e)
{
	const Elf64_Ehdr *eh = &e->eh;
	int ret;

	if (eh->e_phnum && eh->e_phentsize != sizeof(Elf64_Phdr))
		return -ENOEXEC;
	if (eh->e_phnum > ELFSYM_MAX_SEGMENTS)
		return -EFBIG;
	if (eh->e_shnum && eh->e_shentsize != sizeof(Elf64_Shdr))
		return -ENOEXEC;
	if (eh->e_shnum > ELFSYM_MAX_SECTIONS)
		return -EFBIG;
	if ((!eh->e_shnum && eh->e_shoff) || eh->e_shstrndx == SHN_XINDEX)
		return -ENOEXEC;
	e->phnum = eh->e_phnum;
	e->shnum = eh->e_shnum;
	ret = e->phnum ? read_alloc(e, (void **)&e->ph, e->phnum * sizeof(Elf64_Phdr), eh->e_phoff)
		       : 0;
	if (!ret && e->shnum)
		ret = read_alloc(e, (void **)&e->sh, e->shnum * sizeof(Elf64_Shdr), eh->e_shoff);
	return ret;
}

static int open_fd(struct elfsym *e)
{
	struct stat st;
	int ret;

	if (fstat(e->fd, &st))
		return -errno;
	if (!S_ISREG(st.st_mode))
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	if ((uint64_t)st.st_size > ELFSYM_MAX_FILE)
		return -EFBIG;
	e->size = st.st_size;
	if (e->size < sizeof(e->eh))
		return -ENOEXEC;
	ret = read_at(e, &e->eh, sizeof(e->eh), 0);
	if (!ret)
		ret = check_ident(&e->eh);
	return ret ? ret : read_headers(e);
}

struct elfsym *elfsym__open_fd(int fd, struct elfsym_budget *b)
{
	struct elfsym *e = calloc(1, sizeof(*e));
	int ret;

	if (!e) {
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	e->fd = fd;
	if (!b) {
		elfsym__budget(&e->own, ELFSYM_BUDGET_BYTES, ELFSYM_BUDGET_MS);
		b = &e->own;
	}
	e->b = b;
	ret = open_fd(e);
	if (ret) {
		elfsym__close(e);
		errno = -ret;
		return NULL;
	}
	return e;
}

void elfsym__close(struct elfsym *e)
{
	int t;

	if (!e)
		return;
	for (t = 0; t < NTABS; t++) {
		free(e->tab[t].sym);
		free(e->tab[t].str);
	}
	free(e->shstr);
	free(e->sh);
	free(e->ph);
	close(e->fd);
	free(e);
}

int elfsym__fd(const struct elfsym *e)
{
	return e->fd;
}

uint64_t elfsym__bytes_read(const struct elfsym *e)
{
	return e->bytes_read;
}

/* A section's file bytes, checked against the file and a cap, before reading them. */
static int section_bytes(const struct elfsym *e, const Elf64_Shdr *s, uint64_t cap)
{
	if (s->sh_type == SHT_NOBITS)
		return -ENOEXEC;
	if (s->sh_size > cap)
		return -EFBIG;
	return in_file(e, s->sh_offset, s->sh_size) ? 0 : -ENOEXEC;
}

/* The symbol table of this kind and its names, checked, then read; its errno if not. */
static int tab_read(struct elfsym *e, struct symtab *tab, const Elf64_Shdr *s)
{
	const Elf64_Shdr *str;
	int ret;

	if (s->sh_entsize != sizeof(Elf64_Sym) || s->sh_link >= e->shnum ||
	    e->sh[s->sh_link].sh_type != SHT_STRTAB)
		return -ENOEXEC;
	str = &e->sh[s->sh_link];
	ret = section_bytes(e, s, ELFSYM_MAX_SYMTAB) ?: section_bytes(e, str, ELFSYM_MAX_STRTAB);
	if (ret)
		return ret;
	tab->n = s->sh_size / sizeof(Elf64_Sym);
	tab->strsz = str->sh_size;
	ret = read_alloc(e, (void **)&tab->sym, tab->n * sizeof(Elf64_Sym), s->sh_offset);
	return ret ?: read_alloc(e, (void **)&tab->str, tab->strsz, str->sh_offset);
}

/* Table t read (once: its result is kept); an absent one is an empty table. */
static int tab_load(struct elfsym *e, int t)
{
	static const Elf64_Word types[NTABS] = {SHT_DYNSYM, SHT_SYMTAB};
	struct symtab *tab = &e->tab[t];
	size_t i;
	int ret;

	if (tab->state)
		return tab->state < 0 ? tab->state : 0;
	tab->state = 1;
	/* one of each kind (the ELF spec): the first is the one */
	for (i = 0; i < e->shnum && e->sh[i].sh_type != types[t]; i++)
		;
	ret = i < e->shnum ? tab_read(e, tab, &e->sh[i]) : 0;
	if (!ret)
		return 0;
	free(tab->sym);
	free(tab->str);
	/* .symtab is what strip removes: one past the caps (a debug build's) counts as absent */
	*tab = (struct symtab){.state = ret == -EFBIG && t == TAB_SYMTAB ? 1 : ret};
	return tab->state < 0 ? ret : 0;
}

/* Every defined symbol of table t starting with prefix; stops when fn returns non-zero. */
static int each_in(struct elfsym *e, int t, const char *prefix, size_t plen, elfsym_fn fn,
		   void *ctx)
{
	const struct symtab *tab = &e->tab[t];
	int ret = tab_load(e, t);
	size_t i;

	for (i = 0; !ret && i < tab->n; i++) {
		const Elf64_Sym *sym = &tab->sym[i];
		const char *s;

		if (sym->st_shndx == SHN_UNDEF || !sym->st_value || sym->st_name >= tab->strsz)
			continue;
		s = tab->str + sym->st_name; /* ends at the NUL after the table at the latest */
		if (strncmp(s, prefix, plen))
			continue;
		ret = fn(s, sym->st_value, ctx);
	}
	return ret;
}

int elfsym__each(struct elfsym *e, const char *prefix, elfsym_fn fn, void *ctx)
{
	size_t plen = strlen(prefix);
	int t, ret = 0;

	for (t = 0; t < NTABS && !ret; t++)
		ret = each_in(e, t, prefix, plen, fn, ctx);
	return ret;
}

struct find_ctx {
	const char *name;
	size_t prefix_len;
	uint64_t *addr;
	char *found;
	size_t found_len;
};

static int find_cb(const char *s, uint64_t value, void *ctx)
{
	struct find_ctx *f = ctx;

	if ((!f->prefix_len && strcmp(s, f->name)) || (f->found && strlen(s) >= f->found_len))
		return 0;
	if (f->found)
		strcpy(f->found, s);
	*f->addr = value;
	return 1;
}

/* prefix_len 0: name must match whole; else the first symbol starting with name[0..len). */
static int find_sym(struct elfsym *e, const char *name, size_t prefix_len, uint64_t *addr,
		    char *found, size_t found_len)
{
	struct find_ctx f = {name, prefix_len, addr, found, found_len};
	size_t plen = prefix_len ? prefix_len : strlen(name);
	int t, ret = 0;

	/* .dynsym first: exported symbols are what a stripped build keeps */
	for (t = 0; t < NTABS && !ret; t++)
		ret = each_in(e, t, name, plen, find_cb, &f);
	return ret > 0 ? 0 : ret < 0 ? ret : -ENOENT;
}

int elfsym__find(struct elfsym *e, const char *name, uint64_t *addr)
{
	return find_sym(e, name, 0, addr, NULL, 0);
}

int elfsym__find_prefix(struct elfsym *e, const char *prefix, char *name, size_t len)
{
	uint64_t addr;

	if (!*prefix)
		return -EINVAL;
	return find_sym(e, prefix, strlen(prefix), &addr, name, len);
}

int elfsym__first_load(struct elfsym *e, uint64_t *vaddr)
{
	size_t i;

	for (i = 0; i < e->phnum; i++) {
		if (e->ph[i].p_type == PT_LOAD) {
			*vaddr = (e->ph[i].p_vaddr - e->ph[i].p_offset) & ~(uint64_t)4095;
			return 0;
		}
	}
	return -ENOENT;
}

int elfsym__file_offset(struct elfsym *e, uint64_t addr, uint64_t *off)
{
	size_t i;

	for (i = 0; i < e->phnum; i++) {
		const Elf64_Phdr *p = &e->ph[i];

		if (p->p_type != PT_LOAD || addr < p->p_vaddr || addr - p->p_vaddr >= p->p_filesz)
			continue;
		if (!in_file(e, p->p_offset, addr - p->p_vaddr + 1))
			return -ENOEXEC;
		*off = p->p_offset + (addr - p->p_vaddr);
		return 0;
	}
	return -ENOENT;
}

static int shstr_load(struct elfsym *e)
{
	const Elf64_Shdr *s;

	if (e->shstr_state)
		return e->shstr_state < 0 ? e->shstr_state : 0;
	e->shstr_state = -ENOEXEC;
	if (e->eh.e_shstrndx == SHN_UNDEF || e->eh.e_shstrndx >= e->shnum)
		return e->shstr_state;
	s = &e->sh[e->eh.e_shstrndx];
	if (s->sh_type != SHT_STRTAB)
		return e->shstr_state;
	e->shstr_state = section_bytes(e, s, ELFSYM_MAX_SHSTRTAB)
				 ?: read_alloc(e, (void **)&e->shstr, s->sh_size, s->sh_offset);
	if (e->shstr_state)
		return e->shstr_state;
	e->shstrsz = s->sh_size;
	e->shstr_state = 1;
	return 0;
}

int elfsym__section(struct elfsym *e, const char *name, size_t max, void **buf, size_t *len,
		    uint64_t *addr)
{
	size_t i;
	int ret = shstr_load(e);

	if (ret)
		return ret;
	if (max > ELFSYM_MAX_SECTION)
		max = ELFSYM_MAX_SECTION;
	for (i = 0; i < e->shnum; i++) {
		const Elf64_Shdr *s = &e->sh[i];

		if (s->sh_type == SHT_NOBITS || s->sh_name >= e->shstrsz ||
		    strcmp(e->shstr + s->sh_name, name))
			continue;
		ret = section_bytes(e, s, max) ?: read_alloc(e, buf, s->sh_size, s->sh_offset);
		if (ret)
			return ret;
		*len = s->sh_size;
		*addr = s->sh_addr;
		return 0;
	}
	return -ENOENT;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define BUILD_ID_MAX 64
#define NT_GNU_BUILD_ID_ 3

int elfsym__build_id(struct elfsym *e, char *hex, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	uint32_t namesz, descsz;
	uint8_t *p = NULL;
	uint64_t addr;
	size_t n, i;
	int ret;

	ret = elfsym__section(e, ".note.gnu.build-id", 4096, (void **)&p, &n, &addr);
	if (ret)
		return ret;
	ret = -EINVAL;
	if (n < 16)
		goto cleanup;
	namesz = le32(p);
	descsz = le32(p + 4);
	/* "GNU\0", then the id, 4-byte aligned */
	if (namesz != 4 || le32(p + 8) != NT_GNU_BUILD_ID_ || memcmp(p + 12, "GNU", 4) || !descsz ||
	    descsz > BUILD_ID_MAX || descsz > n - 16 || len < 2 * (size_t)descsz + 1)
		goto cleanup;
	for (i = 0; i < descsz; i++) {
		hex[2 * i] = digits[p[16 + i] >> 4];
		hex[2 * i + 1] = digits[p[16 + i] & 15];
	}
	hex[2 * descsz] = 0;
	ret = 0;
cleanup:
	free(p);
	return ret;
}

int elfsym__function_start(struct elfsym *e, uint64_t addr)
{
	uint64_t hdr_addr, lo = 0, hi, count;
	uint8_t *p = NULL;
	size_t n;
	int ret;

	ret = elfsym__section(e, ".eh_frame_hdr", ELFSYM_MAX_SECTION, (void **)&p, &n, &hdr_addr);
	if (ret)
		return ret == -ENOENT ? -ENOTSUP : ret;
	/*
	 * version 1; eh_frame_ptr pcrel sdata4 (0x1b), fde_count udata4 (0x03), the table
	 * datarel sdata4 (0x3b): (initial location, FDE) pairs sorted by location
	 */
	ret = -ENOTSUP;
	if (n < 12 || p[0] != 1 || p[1] != 0x1b || p[2] != 0x03 || p[3] != 0x3b)
		goto out;
	count = le32(p + 8);
	if (!count || count > (n - 12) / 8)
		goto out;
	ret = -ENOENT;
	hi = count;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		uint64_t at = hdr_addr + (int64_t)(int32_t)le32(p + 12 + mid * 8);

		if (at == addr) {
			ret = 0;
			break;
		}
		if (at < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
out:
	free(p);
	return ret;
}

#define MAX_NAME_HITS 16  /* copies of one method name in .rodata */
#define MAX_RELOC_HITS 64 /* relocations that point at them */

/* Add def (link-time) once, if its ml_flags word (at +16 in sec's bytes) is flags. */
static void add_def(uint64_t def, const uint8_t *sec, uint64_t sec_addr, size_t sec_len,
		    uint32_t flags, uint64_t *defs, size_t max, size_t *n)
{
	uint64_t at = def - sec_addr + 16;
	size_t i;

	if (def < sec_addr || at + 4 > sec_len || le32(sec + at) != flags)
		return;
	for (i = 0; i < *n && i < max; i++)
		if (defs[i] == def)
			return;
	if (*n < max)
		defs[*n] = def;
	(*n)++;
}

int elfsym__method_defs(struct elfsym *e, const char *name, uint32_t flags, uint64_t *defs,
			size_t max)
{
	static const char *const data_secs[] = {".data.rel.ro", ".data"};
	uint64_t names[MAX_NAME_HITS], relocs[MAX_RELOC_HITS], ro_addr, sec_addr, rela_addr;
	uint8_t *ro = NULL, *sec = NULL, *rela = NULL;
	size_t ro_len, sec_len, rela_len, nn = 0, nr = 0, n = 0, len = strlen(name), i, k, j;
	int ret;

	ret = elfsym__section(e, ".rodata", ELFSYM_MAX_SECTION, (void **)&ro, &ro_len, &ro_addr);
	if (ret)
		return ret;
	for (i = 0; len && i + len < ro_len && nn < MAX_NAME_HITS; i++) {
		const uint8_t *p = memchr(ro + i, name[0], ro_len - len - i);

		if (!p)
			break;
		i = p - ro;
		if (!memcmp(p, name, len) && !p[len])
			names[nn++] = ro_addr + i;
	}
	free(ro);
	if (!nn)
		return 0;
	ret = elfsym__section(e, ".rela.dyn", ELFSYM_MAX_SECTION, (void **)&rela, &rela_len,
			      &rela_addr);
	if (ret && ret != -ENOENT)
		return ret;
	/* where a relocation writes one: R_X86_64_RELATIVE, the addend the address (read once) */
	for (i = 0; rela && i + sizeof(Elf64_Rela) <= rela_len; i += sizeof(Elf64_Rela)) {
		Elf64_Rela r;

		memcpy(&r, rela + i, sizeof(r));
		if (ELF64_R_TYPE(r.r_info) != R_X86_64_RELATIVE)
			continue;
		for (j = 0; j < nn && nr < MAX_RELOC_HITS; j++)
			if ((uint64_t)r.r_addend == names[j])
				relocs[nr++] = r.r_offset;
	}
	free(rela);
	for (k = 0; k < sizeof(data_secs) / sizeof(data_secs[0]); k++) {
		ret = elfsym__section(e, data_secs[k], ELFSYM_MAX_SECTION, (void **)&sec, &sec_len,
				      &sec_addr);
		if (ret == -ENOENT)
			continue;
		if (ret)
			break;
		/* the pointer as the file holds it */
		for (i = 0; i + 8 <= sec_len; i += 8) {
			uint64_t w = le32(sec + i) | (uint64_t)le32(sec + i + 4) << 32;

			for (j = 0; j < nn; j++)
				if (w == names[j])
					add_def(sec_addr + i, sec, sec_addr, sec_len, flags, defs,
						max, &n);
		}
		/* or as a relocation writes it */
		for (j = 0; j < nr; j++)
			add_def(relocs[j], sec, sec_addr, sec_len, flags, defs, max, &n);
		free(sec);
		sec = NULL;
	}
	return ret && ret != -ENOENT ? ret : (int)(n < 0x7fffffff ? n : 0x7fffffff);
}
