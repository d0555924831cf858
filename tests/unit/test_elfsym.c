// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests for daemon/resolve/elfsym.c, the bounded ELF reader of the target's files: a small
 * well-formed file built here, then the same file broken the ways a hostile one would be
 * (cut short, sizes past the caps or past the file, overlapping or out-of-range sections, a
 * 2 GiB sparse file, a file truncated between the open and the read), and descriptors that
 * are not regular files (a FIFO, a directory, /dev/zero). Every case ends in a clean negative
 * errno, within its budget, and never in a signal.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include "resolve/elfsym.h"

/*
 * The file: ELF header, one PT_LOAD over all of it, the section headers, then .dynsym,
 * .dynstr, .shstrtab and .eh_frame.
 */
#define VADDR 0x400000ull
#define OFF_PH 64
#define OFF_SH 128
#define NSH 5
#define OFF_SYM (OFF_SH + NSH * 64)
#define NSYM 4
#define OFF_STR (OFF_SYM + NSYM * 24)
#define OFF_SHSTR (OFF_STR + 32)
#define OFF_EH (OFF_SHSTR + 64)
#define EH_LEN 16
#define FILE_LEN (OFF_EH + EH_LEN)

enum {
	SH_NULL,
	SH_DYNSYM,
	SH_DYNSTR,
	SH_SHSTRTAB,
	SH_EH
};

static const char dynstr[] = "\0foo\0bar_long\0und";
static const char shstr[] = "\0.dynsym\0.dynstr\0.shstrtab\0.eh_frame";

static char dir[64], path[128];
static uint8_t img[FILE_LEN];

static Elf64_Ehdr *ehdr(void)
{
	return (Elf64_Ehdr *)img;
}

static Elf64_Shdr *shdr(int i)
{
	return (Elf64_Shdr *)(img + OFF_SH) + i;
}

static void put_sym(int i, uint32_t name, uint64_t value, uint16_t shndx)
{
	Elf64_Sym *s = (Elf64_Sym *)(img + OFF_SYM) + i;

	*s = (Elf64_Sym){.st_name = name,
			 .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
			 .st_shndx = shndx,
			 .st_value = value,
			 .st_size = 16};
}

static void put_sh(int i, uint32_t name, uint32_t type, uint64_t off, uint64_t size, uint32_t link,
		   uint64_t entsize)
{
	*shdr(i) = (Elf64_Shdr){.sh_name = name,
				.sh_type = type,
				.sh_addr = VADDR + off,
				.sh_offset = off,
				.sh_size = size,
				.sh_link = link,
				.sh_entsize = entsize};
}

/* The well-formed file in img. */
static void build(void)
{
	Elf64_Ehdr *eh = ehdr();
	Elf64_Phdr *ph = (Elf64_Phdr *)(img + OFF_PH);

	memset(img, 0, sizeof(img));
	memcpy(eh->e_ident, ELFMAG, SELFMAG);
	eh->e_ident[EI_CLASS] = ELFCLASS64;
	eh->e_ident[EI_DATA] = ELFDATA2LSB;
	eh->e_ident[EI_VERSION] = EV_CURRENT;
	eh->e_type = ET_DYN;
	eh->e_machine = EM_X86_64;
	eh->e_version = EV_CURRENT;
	eh->e_phoff = OFF_PH;
	eh->e_shoff = OFF_SH;
	eh->e_ehsize = sizeof(*eh);
	eh->e_phentsize = sizeof(*ph);
	eh->e_phnum = 1;
	eh->e_shentsize = sizeof(Elf64_Shdr);
	eh->e_shnum = NSH;
	eh->e_shstrndx = SH_SHSTRTAB;
	*ph = (Elf64_Phdr){.p_type = PT_LOAD,
			   .p_flags = PF_R | PF_X,
			   .p_vaddr = VADDR,
			   .p_filesz = FILE_LEN,
			   .p_memsz = FILE_LEN};
	put_sym(1, 1, VADDR + 0x100, 1); /* foo */
	put_sym(2, 5, VADDR + 0x140, 1); /* bar_long */
	put_sym(3, 14, 0, SHN_UNDEF);	 /* und: undefined, never found */
	memcpy(img + OFF_STR, dynstr, sizeof(dynstr));
	memcpy(img + OFF_SHSTR, shstr, sizeof(shstr));
	memset(img + OFF_EH, 0xe5, EH_LEN);
	put_sh(SH_DYNSYM, 1, SHT_DYNSYM, OFF_SYM, NSYM * 24, SH_DYNSTR, 24);
	put_sh(SH_DYNSTR, 9, SHT_STRTAB, OFF_STR, sizeof(dynstr), 0, 0);
	put_sh(SH_SHSTRTAB, 17, SHT_STRTAB, OFF_SHSTR, sizeof(shstr), 0, 0);
	put_sh(SH_EH, 27, SHT_PROGBITS, OFF_EH, EH_LEN, 0, 0);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "%s", "/tmp/test_elfsym.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/f", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	rmdir(dir);
	return 0;
}

/* img (len bytes of it) written to path; then the path opened as the daemon opens an image. */
static int put(size_t len)
{
	int fd;

	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, img, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

static struct elfsym *open_img(size_t len)
{
	return elfsym__open_fd(put(len), NULL);
}

/* elfsym__open_fd of img as it is now: NULL with errno want. */
static void expect_open_error(size_t len, int want)
{
	errno = 0;
	assert_null(open_img(len));
	assert_int_equal(errno, want);
}

static uint64_t ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

struct names {
	int n;
	char last[32];
};

static int count_cb(const char *name, uint64_t addr, void *ctx)
{
	struct names *c = ctx;

	(void)addr;
	c->n++;
	snprintf(c->last, sizeof(c->last), "%s", name);
	return 0;
}

static void test_well_formed(void **state)
{
	struct elfsym *e;
	struct names c = {0};
	uint64_t v;
	size_t len;
	void *buf;
	char name[32];

	(void)state;
	build();
	e = open_img(FILE_LEN);
	assert_non_null(e);
	assert_int_equal(elfsym__find(e, "foo", &v), 0);
	assert_int_equal(v, VADDR + 0x100);
	assert_int_equal(elfsym__file_offset(e, v, &v), 0);
	assert_int_equal(v, 0x100);
	assert_int_equal(elfsym__find(e, "und", &v), -ENOENT); /* undefined */
	assert_int_equal(elfsym__find(e, "fo", &v), -ENOENT);
	assert_int_equal(elfsym__find_prefix(e, "bar", name, sizeof(name)), 0);
	assert_string_equal(name, "bar_long");
	assert_int_equal(elfsym__find_prefix(e, "bar", name, 8), -ENOENT); /* does not fit */
	assert_int_equal(elfsym__first_load(e, &v), 0);
	assert_int_equal(v, VADDR);
	assert_int_equal(elfsym__file_offset(e, VADDR + FILE_LEN, &v), -ENOENT);
	assert_int_equal(elfsym__each(e, "", count_cb, &c), 0);
	assert_int_equal(c.n, 2);
	assert_int_equal(elfsym__section(e, ".eh_frame", 1 << 20, &buf, &len, &v), 0);
	assert_int_equal(len, EH_LEN);
	assert_int_equal(v, VADDR + OFF_EH);
	assert_int_equal(((uint8_t *)buf)[EH_LEN - 1], 0xe5);
	free(buf);
	assert_int_equal(elfsym__section(e, ".eh_frame", EH_LEN - 1, &buf, &len, &v), -EFBIG);
	assert_int_equal(elfsym__section(e, ".eh_frame_hdr", 1 << 20, &buf, &len, &v), -ENOENT);
	/* only what was looked at was read: headers, the table and its names, two sections */
	assert_true(elfsym__bytes_read(e) < FILE_LEN + EH_LEN);
	elfsym__close(e);
	elfsym__close(NULL);
}

/* Cut anywhere before its headers end: refused at the open; inside a table: at its look-up. */
static void test_truncated(void **state)
{
	struct elfsym *e;
	uint64_t v;

	(void)state;
	build();
	expect_open_error(0, ENOEXEC);
	expect_open_error(63, ENOEXEC);
	expect_open_error(OFF_PH + 10, ENOEXEC); /* program headers past the end */
	expect_open_error(OFF_SH + 64, ENOEXEC); /* section headers past the end */
	/* the headers whole, the file cut in the names */
	e = open_img(OFF_STR + 4);
	assert_non_null(e);
	assert_int_equal(elfsym__find(e, "foo", &v), -ENOEXEC);
	assert_int_equal(elfsym__find(e, "foo", &v), -ENOEXEC); /* and stays so */
	elfsym__close(e);
	build();
	img[0] = 0x7e; /* not ELF */
	expect_open_error(FILE_LEN, ENOEXEC);
	build();
	img[EI_CLASS] = ELFCLASS32;
	expect_open_error(FILE_LEN, ENOEXEC);
}

/* Counts and sizes past the caps, refused before anything is allocated for or read of them. */
static void test_huge_sizes(void **state)
{
	struct elfsym *e;
	uint64_t v;

	(void)state;
	build();
	ehdr()->e_shnum = ELFSYM_MAX_SECTIONS + 1;
	expect_open_error(FILE_LEN, EFBIG);
	build();
	ehdr()->e_phnum = ELFSYM_MAX_SEGMENTS + 1;
	expect_open_error(FILE_LEN, EFBIG);
	build();
	ehdr()->e_shentsize = 32;
	expect_open_error(FILE_LEN, ENOEXEC);
	build();
	ehdr()->e_shnum = 0; /* extended numbering: no real library's */
	expect_open_error(FILE_LEN, ENOEXEC);
	build();
	shdr(SH_DYNSYM)->sh_size = (uint64_t)ELFSYM_MAX_SYMTAB + 24;
	e = open_img(FILE_LEN);
	assert_int_equal(elfsym__find(e, "foo", &v), -EFBIG);
	elfsym__close(e);
	/* a .symtab past the caps (a debug build's) counts as absent: .dynsym is still read */
	build();
	put_sh(SH_EH, 27, SHT_SYMTAB, OFF_SYM, (uint64_t)ELFSYM_MAX_SYMTAB + 24, SH_DYNSTR, 24);
	e = open_img(FILE_LEN);
	assert_int_equal(elfsym__find(e, "foo", &v), 0);
	assert_int_equal(elfsym__find(e, "nothere", &v), -ENOENT);
	elfsym__close(e);
	build();
	shdr(SH_DYNSTR)->sh_size = (uint64_t)ELFSYM_MAX_STRTAB + 1;
	e = open_img(FILE_LEN);
	assert_int_equal(elfsym__find(e, "foo", &v), -EFBIG);
	assert_true(elfsym__bytes_read(e) < 1024); /* headers only */
	elfsym__close(e);
}

/* Offsets and links that point out of the file or the tables, and tables that overlap. */
static void test_out_of_range(void **state)
{
	static const struct {
		int sh;
		size_t field; /* offsetof in Elf64_Shdr */
		uint64_t value;
		int want;
	} cases[] = {
		{SH_DYNSYM, offsetof(Elf64_Shdr, sh_offset), FILE_LEN - 24, -ENOEXEC},
		{SH_DYNSYM, offsetof(Elf64_Shdr, sh_offset), UINT64_MAX - 8, -ENOEXEC},
		{SH_DYNSYM, offsetof(Elf64_Shdr, sh_size), UINT64_MAX - 8, -EFBIG},
		{SH_DYNSYM, offsetof(Elf64_Shdr, sh_link), NSH, -ENOEXEC},
		{SH_DYNSYM, offsetof(Elf64_Shdr, sh_link), SH_EH, -ENOEXEC},
		{SH_DYNSYM, offsetof(Elf64_Shdr, sh_entsize), 16, -ENOEXEC},
		{SH_DYNSYM, offsetof(Elf64_Shdr, sh_entsize), 0, -ENOEXEC},
		{SH_DYNSTR, offsetof(Elf64_Shdr, sh_offset), FILE_LEN, -ENOEXEC},
		{SH_DYNSTR, offsetof(Elf64_Shdr, sh_type), SHT_NOBITS, -ENOEXEC},
	};
	struct elfsym *e;
	uint64_t v;
	size_t i, len;
	void *buf;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		build();
		memcpy((uint8_t *)shdr(cases[i].sh) + cases[i].field, &cases[i].value, 8);
		if (cases[i].field == offsetof(Elf64_Shdr, sh_link) ||
		    cases[i].field == offsetof(Elf64_Shdr, sh_type))
			memcpy((uint8_t *)shdr(cases[i].sh) + cases[i].field, &cases[i].value, 4);
		e = open_img(FILE_LEN);
		assert_non_null(e);
		assert_int_equal(elfsym__find(e, "foo", &v), cases[i].want);
		elfsym__close(e);
	}
	/* names past their table; section names past theirs; a bad e_shstrndx */
	build();
	put_sym(1, 4096, VADDR + 0x100, 1);
	e = open_img(FILE_LEN);
	assert_int_equal(elfsym__find(e, "foo", &v), -ENOENT);
	elfsym__close(e);
	build();
	shdr(SH_EH)->sh_name = 4096;
	e = open_img(FILE_LEN);
	assert_int_equal(elfsym__section(e, ".eh_frame", 1 << 20, &buf, &len, &v), -ENOENT);
	elfsym__close(e);
	build();
	ehdr()->e_shstrndx = NSH + 3;
	e = open_img(FILE_LEN);
	assert_int_equal(elfsym__section(e, ".eh_frame", 1 << 20, &buf, &len, &v), -ENOEXEC);
	elfsym__close(e);
	/* a symbol table over its own names and the section headers: read, nothing found */
	build();
	shdr(SH_DYNSTR)->sh_offset = OFF_SYM;
	shdr(SH_DYNSTR)->sh_size = FILE_LEN - OFF_SYM;
	shdr(SH_DYNSYM)->sh_size = (FILE_LEN - OFF_SYM) / 24 * 24;
	e = open_img(FILE_LEN);
	assert_int_equal(elfsym__find(e, "foo", &v), -ENOENT);
	elfsym__close(e);
	/* a symbol outside every loaded segment has no file offset */
	build();
	e = open_img(FILE_LEN);
	assert_int_equal(elfsym__file_offset(e, VADDR - 1, &v), -ENOENT);
	elfsym__close(e);
}

/* A FIFO, a directory, a device: refused by what the descriptor is, nothing read. */
static void test_not_regular(void **state)
{
	int fd;

	(void)state;
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	alarm(10); /* a read of the FIFO would wait for a writer */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	assert_true(fd >= 0);
	errno = 0;
	assert_null(elfsym__open_fd(fd, NULL));
	assert_int_equal(errno, EINVAL);
	unlink(path);
	errno = 0;
	assert_null(elfsym__open_fd(open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), NULL));
	assert_int_equal(errno, EISDIR);
	errno = 0;
	assert_null(elfsym__open_fd(open("/dev/zero", O_RDONLY | O_CLOEXEC), NULL));
	assert_int_equal(errno, EINVAL);
	alarm(0);
}

/* Append n bytes of zeros that are data, not a hole, to path. */
static void put_dense(size_t n)
{
	static char zeros[1 << 16];
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	size_t done;

	assert_true(fd >= 0);
	for (done = 0; done < n; done += sizeof(zeros))
		assert_int_equal(write(fd, zeros, sizeof(zeros)), (ssize_t)sizeof(zeros));
	assert_int_equal(close(fd), 0);
}

/*
 * The attack on the daemon's old reader: a 2 GiB sparse file whose symbol table spans it,
 * cut short once the daemon has it open. Refused by its sizes at once; a table within the
 * caps but sparse, refused unread; a written one cut between the open and the read, -EIO.
 * Never SIGBUS.
 */
static void test_sparse_and_cut(void **state)
{
	const uint64_t big = 2ull << 30;
	struct timespec t0;
	struct elfsym *e;
	uint64_t v;
	int fd;

	(void)state;
	build();
	shdr(SH_DYNSYM)->sh_offset = 4096;
	shdr(SH_DYNSYM)->sh_size = (big - 8192) / 24 * 24;
	shdr(SH_DYNSTR)->sh_offset = big - 4096;
	fd = put(FILE_LEN);
	assert_int_equal(truncate(path, big), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	e = elfsym__open_fd(fd, NULL);
	assert_non_null(e);
	assert_int_equal(elfsym__find(e, "foo", &v), -EFBIG);
	assert_true(ms_since(&t0) < 100);
	elfsym__close(e);

	/* within the caps: 8 MiB of table, a hole */
	shdr(SH_DYNSYM)->sh_size = (8u << 20) / 24 * 24;
	fd = put(FILE_LEN);
	assert_int_equal(truncate(path, big), 0);
	e = elfsym__open_fd(fd, NULL);
	assert_int_equal(elfsym__find(e, "foo", &v), -ENOEXEC);
	assert_true(elfsym__bytes_read(e) < 4096);
	elfsym__close(e);

	/* written, then cut between the open and the read */
	fd = put(FILE_LEN);
	assert_int_equal(truncate(path, 4096), 0);
	put_dense(9u << 20);
	assert_int_equal(truncate(path, big), 0);
	e = elfsym__open_fd(fd, NULL);
	assert_non_null(e);
	assert_int_equal(truncate(path, 8192), 0);
	assert_int_equal(elfsym__find(e, "foo", &v), -EIO);
	assert_true(elfsym__bytes_read(e) < (1u << 20));
	elfsym__close(e);
}

/*
 * Real files: where a function starts by .eh_frame_hdr's table (the C library this test runs
 * with), and method table entries by name and flags (the host's Python, whose list.append and
 * the like are METH_O entries), as nanwatchd finds run_backward in a stripped libtorch_python.
 * The synthetic file has neither table.
 */
static void test_function_start_and_method_defs(void **state)
{
	uint64_t addr, defs[16], few[2];
	struct elfsym *e;
	Dl_info info;
	int fd, n, i;

	(void)state;
	assert_true(dladdr((void *)printf, &info) && info.dli_fname);
	fd = open(info.dli_fname, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	e = elfsym__open_fd(fd, NULL);
	assert_non_null(e);
	assert_int_equal(elfsym__find(e, "printf", &addr), 0);
	assert_int_equal(elfsym__function_start(e, addr), 0);
	assert_int_equal(elfsym__function_start(e, addr + 1), -ENOENT); /* inside it */
	assert_int_equal(elfsym__function_start(e, 0), -ENOENT);
	elfsym__close(e);

	fd = open("/usr/bin/python3", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	e = elfsym__open_fd(fd, NULL);
	assert_non_null(e);
	n = elfsym__method_defs(e, "append", 8 /* METH_O */, defs, 16);
	assert_true(n >= 2 && n <= 16); /* list, bytearray, deque, ... */
	for (i = 0; i < n; i++) {
		assert_int_equal(defs[i] % 8, 0);
		assert_true(i == 0 || defs[i] != defs[i - 1]);
	}
	assert_int_equal(elfsym__method_defs(e, "append", 8, few, 2), n); /* counted, 2 kept */
	assert_int_equal(few[0], defs[0]);
	assert_int_equal(elfsym__method_defs(e, "append", 1 /* METH_VARARGS */, defs, 16), 0);
	assert_int_equal(elfsym__method_defs(e, "nw_no_such_method", 8, defs, 16), 0);
	assert_int_equal(elfsym__method_defs(e, "", 8, defs, 16), 0);
	elfsym__close(e);

	build();
	e = open_img(FILE_LEN);
	assert_non_null(e);
	assert_int_equal(elfsym__function_start(e, VADDR + 0x100), -ENOTSUP);
	assert_int_equal(elfsym__method_defs(e, "foo", 8, defs, 16), -ENOENT); /* no .rodata */
	elfsym__close(e);
}

struct note_want {
	char hex[2 * 64 + 1];
};

/* This program's own build-id, read from its PT_NOTE segment in memory. */
static int own_note(struct dl_phdr_info *info, size_t size, void *ctx)
{
	struct note_want *w = ctx;
	int i;

	(void)size;
	if (info->dlpi_name && info->dlpi_name[0])
		return 0; /* the main program comes first, unnamed */
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
		const uint8_t *end = p + ph->p_memsz;

		while (ph->p_type == PT_NOTE && p + 12 <= end) {
			const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
			const uint8_t *desc = p + 12 + ((n->n_namesz + 3) & ~3u);
			uint32_t j;

			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && n->n_descsz <= 64) {
				for (j = 0; j < n->n_descsz; j++)
					sprintf(w->hex + 2 * j, "%02x", desc[j]);
				return 1;
			}
			p = desc + ((n->n_descsz + 3) & ~3u);
		}
	}
	return 1;
}

/* The build-id read from the file is the one the loader mapped; a file without one: -ENOENT. */
static void test_build_id(void **state)
{
	struct note_want want = {};
	char hex[2 * 64 + 1], small[8];
	struct elfsym *e;
	int fd;

	(void)state;
	dl_iterate_phdr(own_note, &want);
	assert_true(strlen(want.hex) >= 16); /* built with --build-id (Debian's default) */
	fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	e = elfsym__open_fd(fd, NULL);
	assert_non_null(e);
	assert_int_equal(elfsym__build_id(e, hex, sizeof(hex)), 0);
	assert_string_equal(hex, want.hex);
	assert_int_equal(elfsym__build_id(e, small, sizeof(small)), -EINVAL); /* no room */
	elfsym__close(e);

	build();
	e = open_img(FILE_LEN);
	assert_non_null(e);
	assert_int_equal(elfsym__build_id(e, hex, sizeof(hex)), -ENOENT);
	elfsym__close(e);
}

/* One budget for several files: bytes refused once spent, reads refused after the deadline. */
static void test_budget(void **state)
{
	struct elfsym_budget b;
	struct elfsym *e;
	uint64_t v;

	(void)state;
	build();
	elfsym__budget(&b, FILE_LEN, 0);
	e = elfsym__open_fd(put(FILE_LEN), &b);
	assert_non_null(e);
	assert_int_equal(elfsym__find(e, "foo", &v), 0); /* headers + table + names fit */
	elfsym__close(e);
	assert_true(b.bytes_read > 0 && b.bytes_read + b.bytes_left == FILE_LEN);
	errno = 0;
	e = elfsym__open_fd(put(FILE_LEN), &b); /* the second file: not enough left */
	if (e) {
		assert_int_equal(elfsym__find(e, "foo", &v), -EFBIG);
		elfsym__close(e);
	} else {
		assert_int_equal(errno, EFBIG);
	}
	elfsym__budget(&b, 1 << 20, 1);
	usleep(5000);
	errno = 0;
	assert_null(elfsym__open_fd(put(FILE_LEN), &b));
	assert_int_equal(errno, ETIME);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_well_formed),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_huge_sizes),
		cmocka_unit_test(test_out_of_range),
		cmocka_unit_test(test_not_regular),
		cmocka_unit_test(test_sparse_and_cut),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_function_start_and_method_defs),
		cmocka_unit_test(test_build_id),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
