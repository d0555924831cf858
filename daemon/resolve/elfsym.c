// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Symbol look-up in the target's ELF files with libelf. Files are never executed. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "resolve/elfsym.h"

struct elfsym {
	int fd;
	Elf *elf;
};

struct elfsym *elfsym__open(const char *path)
{
	struct elfsym *e;
	int err;

	if (elf_version(EV_CURRENT) == EV_NONE) {
		errno = EINVAL;
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (e->fd < 0 && errno == ELOOP)
		e->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (e->fd < 0)
		goto err_free;
	e->elf = elf_begin(e->fd, ELF_C_READ_MMAP, NULL);
	if (!e->elf || elf_kind(e->elf) != ELF_K_ELF) {
		errno = ENOEXEC;
		goto err_close;
	}
	return e;

err_close:
	err = errno;
	if (e->elf)
		elf_end(e->elf);
	close(e->fd);
	errno = err;
err_free:
	err = errno;
	free(e);
	errno = err;
	return NULL;
}

void elfsym__close(struct elfsym *e)
{
	if (!e)
		return;
	elf_end(e->elf);
	close(e->fd);
	free(e);
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

static int each_in(Elf *elf, Elf_Scn *scn, const char *prefix, size_t plen, elfsym_fn fn,
		   void *ctx);

/* prefix_len 0: name must match whole; else the first symbol starting with name[0..len). */
static int find_in(Elf *elf, Elf_Scn *scn, const char *name, size_t prefix_len, uint64_t *addr,
		   char *found, size_t found_len)
{
	struct find_ctx f = {name, prefix_len, addr, found, found_len};

	return each_in(elf, scn, name, prefix_len ? prefix_len : strlen(name), find_cb, &f) > 0
		       ? 0
		       : -ENOENT;
}

static int find_sym(struct elfsym *e, const char *name, size_t prefix_len, uint64_t *addr,
		    char *found, size_t found_len)
{
	static const Elf64_Word types[] = {SHT_DYNSYM, SHT_SYMTAB};
	size_t t;

	/* .dynsym first: exported symbols are what a stripped build keeps */
	for (t = 0; t < 2; t++) {
		Elf_Scn *scn = NULL;

		while ((scn = elf_nextscn(e->elf, scn))) {
			GElf_Shdr sh;

			if (gelf_getshdr(scn, &sh) && sh.sh_type == types[t] &&
			    !find_in(e->elf, scn, name, prefix_len, addr, found, found_len))
				return 0;
		}
	}
	return -ENOENT;
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
	size_t i, n;

	if (elf_getphdrnum(e->elf, &n))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(e->elf, i, &ph) && ph.p_type == PT_LOAD) {
			*vaddr = (ph.p_vaddr - ph.p_offset) & ~(uint64_t)4095;
			return 0;
		}
	}
	return -ENOENT;
}

/* Every defined symbol of one table starting with prefix; stops when fn returns non-zero. */
static int each_in(Elf *elf, Elf_Scn *scn, const char *prefix, size_t plen, elfsym_fn fn, void *ctx)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	GElf_Shdr sh;
	size_t i, n;
	int ret;

	if (!data || !gelf_getshdr(scn, &sh) || !sh.sh_entsize)
		return 0;
	n = sh.sh_size / sh.sh_entsize;
	for (i = 0; i < n; i++) {
		GElf_Sym sym;
		const char *s;

		if (!gelf_getsym(data, i, &sym) || sym.st_shndx == SHN_UNDEF || !sym.st_value)
			continue;
		s = elf_strptr(elf, sh.sh_link, sym.st_name);
		if (!s || strncmp(s, prefix, plen))
			continue;
		ret = fn(s, sym.st_value, ctx);
		if (ret)
			return ret;
	}
	return 0;
}

int elfsym__each(struct elfsym *e, const char *prefix, elfsym_fn fn, void *ctx)
{
	static const Elf64_Word types[] = {SHT_DYNSYM, SHT_SYMTAB};
	size_t plen = strlen(prefix), t;
	int ret;

	for (t = 0; t < 2; t++) {
		Elf_Scn *scn = NULL;

		while ((scn = elf_nextscn(e->elf, scn))) {
			GElf_Shdr sh;

			if (!gelf_getshdr(scn, &sh) || sh.sh_type != types[t])
				continue;
			ret = each_in(e->elf, scn, prefix, plen, fn, ctx);
			if (ret)
				return ret;
		}
	}
	return 0;
}
