/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The scan kernel's fatbin (nvcc's output for cupti/scan.cu, found on the
 * assembler's include path), embedded in the library for cuModuleLoadData /
 * cuLibraryLoadData:
 *   extern const unsigned char nw_scan_fatbin[];
 *   extern const unsigned long nw_scan_fatbin_size;
 * In a .nv_fatbin section, where nvcc's own objects keep theirs, so that
 * cuobjdump lists the library's kernels; hidden: not part of the library's ABI.
 */
	.section .nv_fatbin, "a"
	.balign 16
	.globl nw_scan_fatbin
	.hidden nw_scan_fatbin
	.type nw_scan_fatbin, @object
nw_scan_fatbin:
	.incbin "scan.fatbin"
.Lnw_scan_fatbin_end:
	.size nw_scan_fatbin, .Lnw_scan_fatbin_end - nw_scan_fatbin

	.section .rodata
	.balign 8
	.globl nw_scan_fatbin_size
	.hidden nw_scan_fatbin_size
	.type nw_scan_fatbin_size, @object
nw_scan_fatbin_size:
	.quad .Lnw_scan_fatbin_end - nw_scan_fatbin
	.size nw_scan_fatbin_size, 8

	.section .note.GNU-stack, "", @progbits
