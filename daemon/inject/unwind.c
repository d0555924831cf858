// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unwinding a stopped thread of another process with the .eh_frame tables of its files, as a
 * debugger does without debug information: .eh_frame_hdr's sorted table finds the FDE of a
 * PC, its CIE and FDE call-frame programs give the rule for the frame's CFA and return
 * address at that PC. Only what a return address needs is evaluated: a CFA that is a register
 * plus an offset, registers saved at an offset from it; an expression, a signal frame or a
 * PC without a table ends the walk where it is (the caller then searches the rest of the
 * stack the cruder way). Everything read is bounded by the section it came from; the sections
 * themselves are read from the mapped files (target__open_image), bounded (resolve/elfsym.c),
 * never mapped.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* process_vm_readv */
#endif
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include "inject/unwind.h"
#include "resolve/elfsym.h"
#include "resolve/target.h"

#define MAX_MODS 16384
#define NREGS 17
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16
#define STATE_DEPTH 8
/* the tables of all files together: a call chain through hostile files costs this at most */
#define UNWIND_BUDGET (256ull << 20)

struct mod {
	uint64_t lo, hi, base;
	char *path;
	dev_t dev;
	ino_t ino;
	int state;	   /* 0: not read yet, 1: ready, -1: no usable tables */
	uint64_t bias;	   /* runtime address - link-time address */
	uint8_t *hdr, *eh; /* the two sections, read whole */
	size_t hdr_len, eh_len;
	uint64_t hdr_addr, eh_addr; /* link-time addresses of the two sections */
};

struct unwind {
	pid_t pid;
	struct mod *m;
	size_t n;
	struct elfsym_budget budget; /* bytes only: a slow file ends a walk, not the inject */
};

struct unwind *unwind__new(pid_t pid)
{
	struct unwind *u = calloc(1, sizeof(*u));

	if (u) {
		u->pid = pid;
		elfsym__budget(&u->budget, UNWIND_BUDGET, 0);
	}
	return u;
}

void unwind__free(struct unwind *u)
{
	size_t i;

	if (!u)
		return;
	for (i = 0; i < u->n; i++) {
		free(u->m[i].hdr);
		free(u->m[i].eh);
		free(u->m[i].path);
	}
	free(u->m);
	free(u);
}

int unwind__add(struct unwind *u, uint64_t lo, uint64_t hi, uint64_t base, const char *path,
		dev_t dev, ino_t ino)
{
	struct mod *m;

	if (u->n >= MAX_MODS)
		return 0;
	m = realloc(u->m, (u->n + 1) * sizeof(*m));
	if (!m)
		return -ENOMEM;
	u->m = m;
	m += u->n;
	*m = (struct mod){.lo = lo, .hi = hi, .base = base, .dev = dev, .ino = ino};
	m->path = strdup(path);
	if (!m->path)
		return -ENOMEM;
	u->n++;
	return 0;
}

/* ---- bounded readers ---- */

static size_t uleb(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
	size_t n = 0;
	unsigned shift = 0;

	*v = 0;
	while (p + n < end && shift < 64) {
		uint8_t b = p[n++];

		*v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80))
			return n;
	}
	return 0;
}

static size_t sleb(const uint8_t *p, const uint8_t *end, int64_t *v)
{
	size_t n = 0;
	unsigned shift = 0;
	uint64_t r = 0;
	uint8_t b = 0;

	while (p + n < end && shift < 64) {
		b = p[n++];
		r |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80)) {
			if (shift < 64 && (b & 0x40))
				r |= ~0ULL << shift;
			*v = (int64_t)r;
			return n;
		}
	}
	return 0;
}

size_t unwind__pointer(const uint8_t *p, const uint8_t *end, uint8_t enc, uint64_t addr,
		       uint64_t data, uint64_t *out)
{
	uint64_t v = 0;
	size_t n;

	if (enc == 0xff || (enc & 0x80) || p >= end)
		return 0;
	switch (enc & 0x0f) {
	case 0x00: /* absptr */
	case 0x04: /* udata8 */
	case 0x0c: /* sdata8 */
		n = 8;
		break;
	case 0x03:
	case 0x0b:
		n = 4;
		break;
	case 0x02:
	case 0x0a:
		n = 2;
		break;
	case 0x01:
		n = uleb(p, end, &v);
		break;
	case 0x09:
		n = sleb(p, end, (int64_t *)&v);
		break;
	default:
		return 0;
	}
	if (!n || (size_t)(end - p) < n)
		return 0;
	if (n == 8)
		memcpy(&v, p, 8);
	else if (n == 4 && (enc & 0x0f) == 0x03)
		v = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
		    (uint64_t)p[3] << 24;
	else if (n == 4)
		v = (uint64_t)(int64_t)(int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 |
						 (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
	else if (n == 2 && (enc & 0x0f) == 0x02)
		v = (uint64_t)p[0] | (uint64_t)p[1] << 8;
	else if (n == 2)
		v = (uint64_t)(int64_t)(int16_t)((uint16_t)p[0] | (uint16_t)p[1] << 8);
	switch (enc & 0x70) {
	case 0x00:
		break;
	case 0x10: /* pcrel */
		v += addr;
		break;
	case 0x30: /* datarel */
		v += data;
		break;
	default:
		return 0;
	}
	*out = v;
	return n;
}

static uint32_t u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- a file's tables ---- */

/* The file's .eh_frame_hdr and .eh_frame, read whole; -1 when either is missing or too big. */
static int mod_read(struct mod *m, struct elfsym *e)
{
	uint64_t first;
	void *hdr = NULL, *eh = NULL;

	if (elfsym__first_load(e, &first) ||
	    elfsym__section(e, ".eh_frame_hdr", ELFSYM_MAX_SECTION, &hdr, &m->hdr_len,
			    &m->hdr_addr) ||
	    elfsym__section(e, ".eh_frame", ELFSYM_MAX_SECTION, &eh, &m->eh_len, &m->eh_addr) ||
	    m->hdr_len < 12) {
		free(hdr);
		free(eh);
		return -1;
	}
	m->hdr = hdr;
	m->eh = eh;
	m->bias = m->base - first;
	return 0;
}

static int mod_load(struct unwind *u, struct mod *m)
{
	struct elfsym *e;
	int fd;

	if (m->state)
		return m->state;
	m->state = -1;
	fd = target__open_image(u->pid, m->path, m->lo, m->hi, m->dev, m->ino);
	e = fd < 0 ? NULL : elfsym__open_fd(fd, &u->budget);
	if (e && !mod_read(m, e))
		m->state = 1;
	elfsym__close(e);
	return m->state;
}

static struct mod *mod_at(struct unwind *u, uint64_t pc)
{
	size_t i;

	for (i = 0; i < u->n; i++)
		if (pc >= u->m[i].lo && pc < u->m[i].hi)
			return mod_load(u, &u->m[i]) > 0 ? &u->m[i] : NULL;
	return NULL;
}

/* The FDE (link-time address) whose range may hold pc, from .eh_frame_hdr's table. */
static int hdr_find(const struct mod *m, uint64_t pc, uint64_t *fde)
{
	const uint8_t *p = m->hdr, *end = m->hdr + m->hdr_len, *tab;
	uint64_t ehp, count, lo = 0, hi;
	size_t k;

	/* version 1; the table sorted and encoded datarel sdata4, as every linker writes it */
	if (p[0] != 1 || p[3] != 0x3b)
		return -1;
	k = unwind__pointer(p + 4, end, p[1], m->hdr_addr + 4, m->hdr_addr, &ehp);
	if (!k)
		return -1;
	tab = p + 4 + k;
	k = unwind__pointer(tab, end, p[2], m->hdr_addr + (tab - p), m->hdr_addr, &count);
	if (!k)
		return -1;
	tab += k;
	if (!count || count > (uint64_t)(end - tab) / 8)
		return -1;
	hi = count;
	while (hi - lo > 1) { /* the last entry whose start is <= pc */
		uint64_t mid = lo + (hi - lo) / 2;

		if (m->hdr_addr + (int32_t)u32(tab + mid * 8) <= pc)
			lo = mid;
		else
			hi = mid;
	}
	if (m->hdr_addr + (int32_t)u32(tab + lo * 8) > pc)
		return -1;
	*fde = m->hdr_addr + (int32_t)u32(tab + lo * 8 + 4);
	return 0;
}

struct cie {
	uint64_t code_align;
	int64_t data_align;
	uint64_t ra;
	uint8_t fde_enc;
	int has_z, signal;
	const uint8_t *insn, *end;
};

/* A CIE or FDE record at offset off of .eh_frame: its body [*body, *end). */
static int record(const struct mod *m, uint64_t off, const uint8_t **body, const uint8_t **end)
{
	uint32_t len;

	if (off > m->eh_len || m->eh_len - off < 8)
		return -1;
	len = u32(m->eh + off);
	if (len == 0 || len == 0xffffffff || len > m->eh_len - off - 4)
		return -1; /* a terminator, or 64-bit DWARF (not in .eh_frame) */
	*body = m->eh + off + 4;
	*end = *body + len;
	return 0;
}

static int cie_augmentation(const char *aug, const uint8_t *q, const uint8_t *end, struct cie *c)
{
	uint64_t len, skip;
	const uint8_t *stop;

	if (aug[0] != 'z')
		return aug[0] ? -1 : 0;
	c->has_z = 1;
	q += uleb(q, end, &len);
	if (len > (uint64_t)(end - q))
		return -1;
	stop = q + len;
	for (aug++; *aug; aug++) {
		if (*aug == 'R' && q < stop)
			c->fde_enc = *q++;
		else if (*aug == 'L' && q < stop)
			q++;
		else if (*aug == 'P' && q < stop) {
			uint8_t enc = *q++;

			if (!unwind__pointer(q, stop, enc & 0x7f, 0, 0, &skip))
				return -1;
			q += unwind__pointer(q, stop, enc & 0x7f, 0, 0, &skip);
		} else if (*aug == 'S')
			c->signal = 1;
		else
			return -1;
	}
	c->insn = stop;
	return 0;
}

static int parse_cie(const struct mod *m, uint64_t off, struct cie *c)
{
	const uint8_t *q, *end;
	const char *aug;
	uint8_t version;

	if (record(m, off, &q, &end) || end - q < 4 || u32(q) != 0)
		return -1;
	q += 4;
	memset(c, 0, sizeof(*c));
	version = *q++;
	aug = (const char *)q;
	while (q < end && *q)
		q++;
	if (q++ >= end || (version != 1 && version != 3) || strstr(aug, "eh"))
		return -1;
	q += uleb(q, end, &c->code_align);
	q += sleb(q, end, &c->data_align);
	if (version == 1 && q < end)
		c->ra = *q++;
	else
		q += uleb(q, end, &c->ra);
	if (q > end || c->ra != REG_RA)
		return -1;
	c->insn = q;
	c->end = end;
	return cie_augmentation(aug, q, end, c);
}

struct fde {
	uint64_t start;
	const uint8_t *insn, *end;
};

static int parse_fde(const struct mod *m, uint64_t addr, uint64_t pc, struct cie *c, struct fde *f)
{
	uint64_t off = addr - m->eh_addr, range, auglen;
	const uint8_t *q, *end;
	uint32_t cie_ptr;
	size_t k;

	if (addr < m->eh_addr || record(m, off, &q, &end) || end - q < 4)
		return -1;
	cie_ptr = u32(q);
	if (!cie_ptr || cie_ptr > off + 4 || parse_cie(m, off + 4 - cie_ptr, c))
		return -1;
	q += 4;
	k = unwind__pointer(q, end, c->fde_enc, m->eh_addr + (q - m->eh), 0, &f->start);
	if (!k)
		return -1;
	q += k;
	k = unwind__pointer(q, end, c->fde_enc & 0x0f, 0, 0, &range);
	if (!k || pc < f->start || pc - f->start >= range)
		return -1;
	q += k;
	if (c->has_z) {
		q += uleb(q, end, &auglen);
		if (auglen > (uint64_t)(end - q))
			return -1;
		q += auglen;
	}
	f->insn = q;
	f->end = end;
	return 0;
}

/* ---- the call-frame program ---- */

enum how {
	SAME = 0,
	UNDEF,
	OFFSET,
	VAL_OFFSET,
	OTHER
};

struct rule {
	uint8_t how;
	int64_t off;
};

struct row {
	uint64_t cfa_reg;
	int64_t cfa_off;
	int cfa_other; /* an expression */
	struct rule r[NREGS];
};

struct prog {
	const struct cie *c;
	const struct row *init; /* the CIE's row, for DW_CFA_restore */
	struct row saved[STATE_DEPTH];
	int depth;
};

static void set_rule(struct row *row, uint64_t reg, uint8_t how, int64_t off)
{
	if (reg < NREGS)
		row->r[reg] = (struct rule){how, off};
}

/* One instruction with operands (op >= 0x01 and < 0x40); bytes used after op, -1 if unknown. */
static int extended(struct prog *pg, struct row *row, uint8_t op, const uint8_t *p,
		    const uint8_t *end, uint64_t *advance)
{
	const int64_t da = pg->c->data_align;
	const uint8_t *q = p;
	uint64_t reg = 0, a = 0;
	int64_t s = 0;

	switch (op) {
	case 0x02: /* advance_loc1 */
		if (q >= end)
			return -1;
		*advance = *q++;
		break;
	case 0x03:
		if (end - q < 2)
			return -1;
		*advance = q[0] | q[1] << 8;
		q += 2;
		break;
	case 0x04:
		if (end - q < 4)
			return -1;
		*advance = u32(q);
		q += 4;
		break;
	case 0x05: /* offset_extended */
		q += uleb(q, end, &reg);
		q += uleb(q, end, &a);
		set_rule(row, reg, OFFSET, (int64_t)a * da);
		break;
	case 0x06: /* restore_extended */
		q += uleb(q, end, &reg);
		if (reg < NREGS)
			row->r[reg] = pg->init->r[reg];
		break;
	case 0x07: /* undefined */
	case 0x08: /* same_value */
		q += uleb(q, end, &reg);
		set_rule(row, reg, op == 0x07 ? UNDEF : SAME, 0);
		break;
	case 0x09: /* register */
		q += uleb(q, end, &reg);
		q += uleb(q, end, &a);
		set_rule(row, reg, OTHER, 0);
		break;
	case 0x0a: /* remember_state */
		if (pg->depth == STATE_DEPTH)
			return -1;
		pg->saved[pg->depth++] = *row;
		break;
	case 0x0b: /* restore_state */
		if (!pg->depth)
			return -1;
		*row = pg->saved[--pg->depth];
		break;
	case 0x0c: /* def_cfa */
		q += uleb(q, end, &row->cfa_reg);
		q += uleb(q, end, &a);
		row->cfa_off = a;
		row->cfa_other = 0;
		break;
	case 0x0d: /* def_cfa_register */
		q += uleb(q, end, &row->cfa_reg);
		row->cfa_other = 0;
		break;
	case 0x0e: /* def_cfa_offset */
		q += uleb(q, end, &a);
		row->cfa_off = a;
		break;
	case 0x0f: /* def_cfa_expression */
		q += uleb(q, end, &a);
		if (a > (uint64_t)(end - q))
			return -1;
		q += a;
		row->cfa_other = 1;
		break;
	case 0x10: /* expression */
	case 0x16: /* val_expression */
		q += uleb(q, end, &reg);
		q += uleb(q, end, &a);
		if (a > (uint64_t)(end - q))
			return -1;
		q += a;
		set_rule(row, reg, OTHER, 0);
		break;
	case 0x11: /* offset_extended_sf */
	case 0x15: /* val_offset_sf */
		q += uleb(q, end, &reg);
		q += sleb(q, end, &s);
		set_rule(row, reg, op == 0x11 ? OFFSET : VAL_OFFSET, s * da);
		break;
	case 0x12: /* def_cfa_sf */
		q += uleb(q, end, &row->cfa_reg);
		q += sleb(q, end, &s);
		row->cfa_off = s * da;
		row->cfa_other = 0;
		break;
	case 0x13: /* def_cfa_offset_sf */
		q += sleb(q, end, &s);
		row->cfa_off = s * da;
		break;
	case 0x14: /* val_offset */
		q += uleb(q, end, &reg);
		q += uleb(q, end, &a);
		set_rule(row, reg, VAL_OFFSET, (int64_t)a * da);
		break;
	case 0x2e: /* GNU_args_size */
		q += uleb(q, end, &a);
		break;
	case 0x2f: /* GNU_negative_offset_extended */
		q += uleb(q, end, &reg);
		q += uleb(q, end, &a);
		set_rule(row, reg, OFFSET, -(int64_t)a * da);
		break;
	default: /* set_loc and vendor extensions */
		return -1;
	}
	return q > end ? -1 : (int)(q - p);
}

/* Run [p, end) from location loc up to pc: row holds the rules in effect at pc. */
static int run(struct prog *pg, struct row *row, const uint8_t *p, const uint8_t *end, uint64_t loc,
	       uint64_t pc)
{
	while (p < end) {
		uint8_t op = *p++, low = op & 0x3f;
		uint64_t adv = 0, a;
		int k;

		if ((op & 0xc0) == 0x40) {
			adv = low;
		} else if ((op & 0xc0) == 0x80) { /* offset */
			p += uleb(p, end, &a);
			set_rule(row, low, OFFSET, (int64_t)a * pg->c->data_align);
		} else if ((op & 0xc0) == 0xc0) { /* restore */
			if (low < NREGS)
				row->r[low] = pg->init->r[low];
		} else if (op) {
			k = extended(pg, row, op, p, end, &adv);
			if (k < 0)
				return -1;
			p += k;
		}
		if (adv) {
			loc += adv * pg->c->code_align;
			if (loc > pc)
				return 0;
		}
	}
	return 0;
}

/* The rules at link-time address pc; -1 when pc has no FDE or the rules cannot be had. */
static int rules_at(const struct mod *m, uint64_t pc, struct row *row)
{
	struct prog pg = {};
	struct row init = {};
	struct cie c;
	struct fde f;
	uint64_t fde;

	if (hdr_find(m, pc, &fde) || parse_fde(m, fde, pc, &c, &f) || c.signal)
		return -1;
	pg.c = &c;
	pg.init = &init;
	if (run(&pg, &init, c.insn, c.end, 0, UINT64_MAX))
		return -1;
	*row = init;
	pg.depth = 0;
	return run(&pg, row, f.insn, f.end, f.start, pc);
}

/* ---- the walk ---- */

static int read_u64(pid_t pid, uint64_t addr, uint64_t lo, uint64_t hi, uint64_t *v)
{
	struct iovec local = {v, 8}, remote = {(void *)addr, 8};

	if (addr < lo || addr > hi - 8)
		return -1;
	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == 8 ? 0 : -1;
}

/* One frame up: 1 at the outermost frame, 0 with rg the caller's, -1 when it cannot go on. */
static int step(struct unwind *u, struct unwind_regs *rg, int first, uint64_t lo, uint64_t hi)
{
	uint64_t pc = rg->r[REG_RA], cfa, v;
	struct unwind_regs next = {};
	struct row row;
	struct mod *m;
	int i;

	/* a return address may be just past a call to a noreturn function: look it up less 1 */
	m = mod_at(u, first ? pc : pc - 1);
	if (!m || rules_at(m, (first ? pc : pc - 1) - m->bias, &row) || row.cfa_other ||
	    row.cfa_reg >= NREGS || !(rg->known & (1u << row.cfa_reg)))
		return -1;
	cfa = rg->r[row.cfa_reg] + row.cfa_off;
	if (row.r[REG_RA].how == UNDEF)
		return 1; /* the thread's first frame (_start, clone) */
	if (row.r[REG_RA].how != OFFSET || cfa <= rg->r[REG_RSP])
		return -1;
	for (i = 0; i < NREGS; i++) {
		const struct rule *r = &row.r[i];

		if (r->how == OFFSET && !read_u64(u->pid, cfa + r->off, lo, hi, &v)) {
			next.r[i] = v;
			next.known |= 1u << i;
		} else if (r->how == VAL_OFFSET) {
			next.r[i] = cfa + r->off;
			next.known |= 1u << i;
		} else if (r->how == SAME && (rg->known & (1u << i)) &&
			   (i == 3 || i == REG_RBP || i >= 12)) { /* callee-saved: kept */
			next.r[i] = rg->r[i];
			next.known |= 1u << i;
		}
	}
	if (!(next.known & (1u << REG_RA)))
		return -1;
	next.r[REG_RSP] = cfa;
	next.known |= 1u << REG_RSP;
	*rg = next;
	return rg->r[REG_RA] ? 0 : 1;
}

size_t unwind__walk(struct unwind *u, const struct unwind_regs *regs, uint64_t stack_lo,
		    uint64_t stack_hi, uint64_t *pcs, size_t max, uint64_t *rest)
{
	struct unwind_regs rg = *regs;
	size_t n = 0;

	*rest = rg.r[REG_RSP];
	while (n < max) {
		int ret;

		pcs[n++] = rg.r[REG_RA];
		ret = step(u, &rg, n == 1, stack_lo, stack_hi);
		if (ret < 0)
			return n; /* *rest: the stack pointer of the frame it stopped at */
		if (ret > 0) {
			*rest = 0;
			return n;
		}
		*rest = rg.r[REG_RSP];
	}
	return n;
}
