# nanwatch: make | make test | make demo | make bench | make install
OUTPUT := build
TRIXIE_ROOT := $(OUTPUT)/trixie-root
FORKY_ROOT := $(OUTPUT)/forky-root
CLANG ?= clang
BPFTOOL ?= bpftool
CC ?= gcc
PYTHON ?= /usr/bin/python3
PREFIX ?= /usr/local
ARCH := $(shell uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')

CFLAGS ?= -g -O2
# Required whatever CFLAGS a user gives (make CFLAGS=-O0 replaces CFLAGS, not these).
NW_CFLAGS := -Wall -Wextra -Werror -std=gnu11 -D_GNU_SOURCE -MMD -MP
INCLUDES := -I$(OUTPUT) -Ibpf -Idaemon
LDLIBS := -lbpf -lelf -lz -lm -lyaml -pthread
BPF_CFLAGS := -g -O2 -target bpf -mcpu=v3 -D__TARGET_ARCH_$(ARCH) -Wall -Werror

DAEMON_SRCS := $(wildcard daemon/*.c daemon/*/*.c)
DAEMON_OBJS := $(patsubst daemon/%.c,$(OUTPUT)/daemon/%.o,$(DAEMON_SRCS))
LIB_OBJS := $(filter-out $(OUTPUT)/daemon/main.o,$(DAEMON_OBJS))
# the tools' own code (nanwatch-tail's JSON reader and event formatter, nanwatch-collect's
# model): never in the daemon
TAIL_SRCS := $(wildcard tools/tail/*.c tools/collect/*.c)
TAIL_OBJS := $(patsubst tools/%.c,$(OUTPUT)/tools/%.o,$(TAIL_SRCS))
TOOL_INCLUDES := $(INCLUDES) -Itools/tail -Itools/collect -Icupti
# Each binary links only the objects it uses: the linker takes from an archive
# just the members that resolve a reference (shared libraries: --as-needed).
DAEMON_LIB := $(OUTPUT)/libnanwatch.a
TAIL_LIB := $(OUTPUT)/libnwtail.a
LINK_LIBS := $(TAIL_LIB) $(DAEMON_LIB)
AS_NEEDED := -Wl,--as-needed
TEST_SRCS := $(wildcard tests/unit/test_*.c)
TEST_BINS := $(patsubst tests/unit/%.c,$(OUTPUT)/tests/%,$(TEST_SRCS))
# the unit tests' fake target memory (tests/unit/fakemem.c): linked into the tests that use it
TEST_LIB := $(OUTPUT)/tests/libfakemem.a
# the user commands in C (tools/), and the benchmarks' and checks' helpers (bench/)
TOOL_SRCS := $(wildcard tools/*.c)
TOOL_BINS := $(patsubst tools/%.c,$(OUTPUT)/%,$(TOOL_SRCS))
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(patsubst bench/%.c,$(OUTPUT)/%,$(BENCH_SRCS))
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
# the injection tests' target, library, tracer and driver (tests/inject/)
INJECT_BINS := $(addprefix $(OUTPUT)/tests/inject/,counter traced nwinject libmarker.so)
# the security tests' helper that starts a process under a chosen pid (tests/security/)
SECURITY_BINS := $(OUTPUT)/tests/security/withpid
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(OUTPUT)/%,$(FUZZ_SRCS))
# the reference pages: docs/man/NAME.SECTION.rst built into build/man/NAME.SECTION (rst2man)
MAN_SRCS := $(wildcard docs/man/*.rst)
MAN_PAGES := $(patsubst docs/man/%.rst,$(OUTPUT)/man/%,$(MAN_SRCS))
RST2MAN ?= rst2man

# C sources make format-check holds to .clang-format
FORMAT_SRCS := $(wildcard bpf/*.[ch] daemon/*.[ch] daemon/*/*.[ch] tools/*.c tools/tail/*.[ch] \
	       tools/collect/*.[ch] bench/*.c tests/unit/*.[ch] tests/fuzz/*.c tests/gpu/*.[ch] cupti/*.[ch] \
	       cupti/*.cu)

# The GPU library, built when the CUDA toolkit is there (CUDA_HOME, default /usr/local/cuda,
# or NVCC): cupti/*.c and the scan kernel's fatbin (every SM nvcc offers from sm_75 through
# sm_90, and the highest one's PTX) in libnanwatch_cupti.so. Nothing from CUDA is linked: the
# library opens libcuda and libcupti at run time.
ifdef NVCC
CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC) 2>/dev/null)))
else
CUDA_HOME ?= /usr/local/cuda
NVCC := $(CUDA_HOME)/bin/nvcc
endif
HAVE_CUDA := $(shell command -v $(NVCC) 2>/dev/null)
GPU_LIB := $(OUTPUT)/libnanwatch_cupti.so
CUPTI_OBJS := $(patsubst cupti/%.c,$(OUTPUT)/cupti/%.o,$(wildcard cupti/*.c))
CUDA_SMS = $(sort $(shell $(NVCC) --list-gpu-code | sed -n 's/^sm_\([0-9]*\)$$/\1/p' | \
	   awk '$$1 >= 75 && $$1 <= 90'))
NVCC_FLAGS := -O3 -std=c++17 -Ibpf -Icupti --no-compress
FORMAT_SRCS += $(wildcard tests/inject/*.c tests/security/*.c)

# make asan: daemon, tools and unit tests with ASan+UBSan in their own output directory, then
# the unit tests and a few fast integration cases (real BPF) under them.
ASAN_OUTPUT := build-asan
ASAN_CFLAGS := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
	       -fno-sanitize-recover=all
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ASAN_CASES := trainer_nan_input backward_sqrt_zero error_thread_id output_stalled_collector
# make fuzz: libFuzzer targets (clang) for the layout parser, the ring-record decoding and
# the JSON reader, each run FUZZ_SECONDS from its checked-in corpus tests/fuzz/corpus/NAME/
# (new inputs go to build-fuzz/corpus/NAME, crashes to build-fuzz/crash-NAME-*).
FUZZ_OUTPUT := build-fuzz
FUZZ_CC := clang
FUZZ_CFLAGS := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
	       -fno-sanitize-recover=all -fsanitize=fuzzer-no-link
FUZZ_SECONDS ?= 5

ifeq ($(V),1)
Q =
msg =
else
Q = @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

.DELETE_ON_ERROR:
.SECONDARY:
.PHONY: all deps test unit integration demo bench install clean check-cflags asan fuzz verifier-stats \
	format-check format test-deps \
	sanitized-build fuzz-build bpf-headers-check gpu gpu-check

all: deps $(OUTPUT)/nanwatchd $(TOOL_BINS) $(BENCH_BINS) $(MAN_PAGES) gpu

deps:
	$(Q)scripts/install-deps

test-deps:
	$(Q)scripts/install-deps --test

# Every rule that compiles waits for one of these, so for the packages too (make -j).
$(OUTPUT) $(OUTPUT)/daemon $(OUTPUT)/tests $(OUTPUT)/tools/tail $(OUTPUT)/cupti: | deps
	$(Q)mkdir -p $@

$(OUTPUT)/vmlinux.h: | $(OUTPUT)
	$(call msg,GEN,$@)
	$(Q)$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@

$(OUTPUT)/%.bpf.o: bpf/%.bpf.c $(OUTPUT)/vmlinux.h | $(OUTPUT)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) $(INCLUDES) -MMD -MP -c $< -o $@

# Every BPF header and program file compiles on its own, from a file that includes only it
# (a static helper its includer does not use is no error there: -Wno-unused-function).
BPF_ALONE := $(wildcard bpf/*.bpf.h) $(filter-out bpf/nanwatch.bpf.c,$(wildcard bpf/*.bpf.c))

bpf-headers-check: $(OUTPUT)/vmlinux.h
	$(call msg,CHECK,bpf/*.bpf.h and program files alone)
	$(Q)for f in $(BPF_ALONE); do \
		printf '#include "%s"\n' "$${f#bpf/}" | $(CLANG) $(BPF_CFLAGS) $(INCLUDES) \
			-Wno-unused-function -fsyntax-only -x c - || \
		{ echo "$$f does not compile on its own"; exit 1; }; \
	done

$(OUTPUT)/%.skel.h: $(OUTPUT)/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< > $@

$(OUTPUT)/daemon/%.o: daemon/%.c | $(OUTPUT)/daemon
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(INCLUDES) -c $< -o $@

$(OUTPUT)/tools/%.o: tools/%.c | $(OUTPUT)/tools/tail
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(TOOL_INCLUDES) -c $< -o $@

$(DAEMON_LIB): $(LIB_OBJS) | $(OUTPUT)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(TAIL_LIB): $(TAIL_OBJS) | $(OUTPUT)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

# Objects that include the skeleton need it generated first.
$(OUTPUT)/daemon/attach/probe.o: $(OUTPUT)/nanwatch.skel.h
$(OUTPUT)/daemon/service/procs.o: $(OUTPUT)/procs.skel.h
$(OUTPUT)/daemon/attach/readcal.o: $(OUTPUT)/readcal.skel.h

$(OUTPUT)/nanwatchd: $(OUTPUT)/daemon/main.o $(DAEMON_LIB)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(AS_NEEDED) $^ $(LDLIBS) -o $@

$(OUTPUT)/%: tools/%.c $(LINK_LIBS) | $(OUTPUT)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(TOOL_INCLUDES) $(AS_NEEDED) $< $(LINK_LIBS) $(LDLIBS) -o $@

$(OUTPUT)/%: bench/%.c $(LINK_LIBS) | $(OUTPUT)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(TOOL_INCLUDES) $(AS_NEEDED) $< $(LINK_LIBS) $(LDLIBS) -o $@

$(OUTPUT)/man/%: docs/man/%.rst | $(OUTPUT)
	$(call msg,MAN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(RST2MAN) --strict --no-generator --no-datestamp $< $@

$(OUTPUT)/fuzz_%: tests/fuzz/fuzz_%.c $(LINK_LIBS) | $(OUTPUT)
	$(call msg,FUZZ-CC,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) -fsanitize=fuzzer $(TOOL_INCLUDES) $(AS_NEEDED) $< \
		$(LINK_LIBS) $(LDLIBS) -o $@

$(OUTPUT)/tests/fakemem.o: tests/unit/fakemem.c | $(OUTPUT)/tests
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(TOOL_INCLUDES) -c $< -o $@

$(TEST_LIB): $(OUTPUT)/tests/fakemem.o
	$(call msg,AR,$@)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(OUTPUT)/tests/%: tests/unit/%.c $(TEST_LIB) $(LINK_LIBS) | $(OUTPUT)/tests
	$(call msg,TEST-CC,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(TOOL_INCLUDES) $(AS_NEEDED) $< $(TEST_LIB) $(LINK_LIBS) \
		$(LDLIBS) -lcmocka -o $@

$(OUTPUT)/tests/inject/libmarker.so: tests/inject/marker.c | $(OUTPUT)/tests
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) -shared -fPIC $< -o $@

$(OUTPUT)/tests/inject/counter: tests/inject/counter.c | $(OUTPUT)/tests
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $< -pthread -o $@

$(OUTPUT)/tests/inject/traced: tests/inject/traced.c | $(OUTPUT)/tests
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $< -o $@

$(OUTPUT)/tests/inject/nwinject: tests/inject/nwinject.c $(DAEMON_LIB) | $(OUTPUT)/tests
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(INCLUDES) $(AS_NEEDED) $< $(DAEMON_LIB) $(LDLIBS) -o $@

$(OUTPUT)/tests/security/withpid: tests/security/withpid.c | $(OUTPUT)/tests
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $< -o $@

# built with the unit tests, for tests/integration/test_inject.py and test_security_gpu.py
test unit: $(INJECT_BINS) $(SECURITY_BINS)

test: all test-deps $(TEST_BINS) trixie-root forky-root
	$(Q)tests/unit/run-unit $(TEST_BINS)
	$(Q)$(MAKE) --no-print-directory gpu-check
	$(Q)tests/check-cflags
	$(Q)tests/check-includes
	$(Q)$(MAKE) --no-print-directory format-check
	$(Q)$(MAKE) --no-print-directory bpf-headers-check
	$(Q)$(OUTPUT)/verifier-stats --max $(VERIFIER_MAX) --limits $(VERIFIER_LIMITS) \
		$(LAYOUT_PAIRS)
	$(Q)$(PYTHON) tests/check-scan-loop $(OUTPUT)/nanwatch.bpf.o
	$(Q)$(MAKE) --no-print-directory fuzz
	$(Q)tests/integration/run $(PYTHON) $(OUTPUT)/nanwatchd $(TRIXIE_ROOT) $(FORKY_ROOT) \
		$(OUTPUT)/integration-roots.log

unit: all $(TEST_BINS)
	$(Q)tests/unit/run-unit $(TEST_BINS)

# what sanitized-build and fuzz-build make, run in a sub-make with OUTPUT and CFLAGS set
sanitized-build: $(OUTPUT)/nanwatchd $(TOOL_BINS) $(TEST_BINS)
fuzz-build: $(FUZZ_BINS)

asan: deps
	$(Q)$(MAKE) --no-print-directory OUTPUT=$(ASAN_OUTPUT) CFLAGS="$(ASAN_CFLAGS)" \
		sanitized-build
	$(Q)$(ASAN_ENV) tests/unit/run-unit $(patsubst $(OUTPUT)/%,$(ASAN_OUTPUT)/%,$(TEST_BINS))
	$(Q)for f in tests/fuzz/corpus/json/*; do cat "$$f"; echo; done | \
		$(ASAN_ENV) $(ASAN_OUTPUT)/nanwatch-tail --no-color >/dev/null
	$(Q)for k in $(ASAN_CASES); do \
		$(ASAN_ENV) $(PYTHON) -m pytest tests/integration -q -rfEs --env host \
			--daemon $(ASAN_OUTPUT)/nanwatchd -k $$k || exit 1; \
	done

fuzz: deps
	$(Q)$(MAKE) --no-print-directory OUTPUT=$(FUZZ_OUTPUT) CC=$(FUZZ_CC) \
		CFLAGS="$(FUZZ_CFLAGS)" fuzz-build
	$(Q)for f in $(patsubst tests/fuzz/fuzz_%.c,%,$(FUZZ_SRCS)); do \
		mkdir -p $(FUZZ_OUTPUT)/corpus/$$f && \
		echo "== fuzz_$$f ($(FUZZ_SECONDS) s)" && \
		$(FUZZ_OUTPUT)/fuzz_$$f -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
			-print_final_stats=1 -artifact_prefix=$(FUZZ_OUTPUT)/crash-$$f- \
			$(FUZZ_OUTPUT)/corpus/$$f tests/fuzz/corpus/$$f \
			2>$(FUZZ_OUTPUT)/fuzz_$$f.log || \
		{ tail -n 40 $(FUZZ_OUTPUT)/fuzz_$$f.log; echo "fuzz_$$f failed"; exit 1; }; \
		grep -E '^stat::number_of_executed_units|^Done' $(FUZZ_OUTPUT)/fuzz_$$f.log; \
	done

# Every C source as clang-format writes it (.clang-format); make format rewrites them so.
format-check: deps
	$(call msg,FORMAT,$(words $(FORMAT_SRCS)) C sources against .clang-format)
	$(Q)clang-format --dry-run -Werror $(FORMAT_SRCS)

format: deps
	$(Q)clang-format -i $(FORMAT_SRCS)

ifneq ($(HAVE_CUDA),)
gpu: $(GPU_LIB) $(OUTPUT)/tests/libnwemu_cuda.so

# nvcc runs only when scan.cu or a header it includes changed (-MD)
$(OUTPUT)/cupti/scan.fatbin: cupti/scan.cu | $(OUTPUT)/cupti
	$(call msg,NVCC,$@)
	$(Q)$(NVCC) -fatbin $(NVCC_FLAGS) $(foreach s,$(CUDA_SMS),-gencode arch=compute_$(s),code=sm_$(s)) \
		-gencode arch=compute_$(lastword $(CUDA_SMS)),code=compute_$(lastword $(CUDA_SMS)) \
		-MD -MP -MF $(OUTPUT)/cupti/scan.d -o $@ $<

$(OUTPUT)/cupti/fatbin.o: cupti/fatbin.S $(OUTPUT)/cupti/scan.fatbin
	$(call msg,AS,$@)
	$(Q)$(CC) -c -Wa,-I$(OUTPUT)/cupti $< -o $@

$(OUTPUT)/cupti/%.o: cupti/%.c | $(OUTPUT)/cupti
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) -fPIC -Ibpf -Icupti -I$(CUDA_HOME)/include -c $< -o $@

$(GPU_LIB): $(CUPTI_OBJS) $(OUTPUT)/cupti/fatbin.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) -shared -Wl,-z,defs $^ -ldl -lpthread -o $@

# the fatbin in the library holds every SM of CUDA_SMS and the PTX
gpu-check: gpu
	$(Q)$(PYTHON) tests/check-fatbin $(GPU_LIB) $(OUTPUT)/cupti/scan.fatbin $(CUDA_SMS)
else
gpu:
	@echo "  SKIP     $(GPU_LIB): no CUDA toolkit ($(NVCC) not found; set CUDA_HOME or NVCC)"

gpu-check: gpu
endif

# make CFLAGS=... keeps the required flags, and the tools it builds work
check-cflags:
	$(Q)tests/check-cflags

# libnanwatch_cupti.so's host side without a GPU: its C sources built into a test copy of the
# library (a stand-in fatbin), run against mock libcuda and libcupti (tests/unit/cupti/); the
# test_cupti_* binaries load it as the driver would
CUPTI_HOST_SRCS := cupti/inject.c cupti/interpose.c cupti/launch.c cupti/proto.c cupti/worker.c
CUPTI_TEST_FLAGS := -Ibpf -Icupti -Itests/unit/cupti -fPIC
# test_cupti_proto checks cupti/cuabi.h against CUDA's headers where they are installed
CUPTI_CUDA_INC := $(wildcard /usr/local/cuda/include)
# gcc's -MMD names one source's headers when it compiles and links several at once
CUPTI_TEST_HDRS := $(wildcard cupti/*.h tests/unit/cupti/*.h) bpf/nwgpu.h bpf/nanwatch.h
CUPTI_MOCKS := $(OUTPUT)/tests/libnwmock_cupti.so $(OUTPUT)/tests/libnwmock_cuda.so \
	$(OUTPUT)/tests/libnwmock_app.so
FORMAT_SRCS += $(filter-out $(FORMAT_SRCS),$(CUPTI_HOST_SRCS) cupti/cuabi.h cupti/nwcupti.h) \
	       $(wildcard tests/unit/cupti/*.[ch])

$(OUTPUT)/tests/libnwmock_cupti.so: tests/unit/cupti/mock_cupti.c $(CUPTI_TEST_HDRS) | $(OUTPUT)/tests
	$(call msg,MOCK,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(CUPTI_TEST_FLAGS) -shared $< -o $@

$(OUTPUT)/tests/libnwmock_cuda.so: tests/unit/cupti/mock_cuda.c $(OUTPUT)/tests/libnwmock_cupti.so \
		$(CUPTI_TEST_HDRS)
	$(call msg,MOCK,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(CUPTI_TEST_FLAGS) -shared $< \
		-L$(OUTPUT)/tests -l:libnwmock_cupti.so -Wl,-rpath,'$$ORIGIN' -lpthread -lm -o $@

# the emulated driver the end-to-end test runs the real library against (device memory is the
# process's own; the scan kernel runs on the host through cupti/classify.h)
$(OUTPUT)/tests/libnwemu_cuda.so: tests/unit/cupti/emu_cuda.c $(OUTPUT)/tests/libnwmock_cupti.so \
		cupti/classify.h bpf/nwfloat.h $(CUPTI_TEST_HDRS)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(CUPTI_TEST_FLAGS) -shared -Wl,-z,defs $< \
		-L$(OUTPUT)/tests -l:libnwmock_cupti.so -Wl,-rpath,'$$ORIGIN' -ldl -lpthread -o $@

$(OUTPUT)/tests/libcudart.so.13: tests/unit/cupti/mock_cudart.c $(OUTPUT)/tests/libnwmock_cuda.so \
		$(CUPTI_TEST_HDRS)
	$(call msg,MOCK,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(CUPTI_TEST_FLAGS) -shared $< \
		-L$(OUTPUT)/tests -l:libnwmock_cuda.so -Wl,-rpath,'$$ORIGIN' -o $@

$(OUTPUT)/tests/libnwmock_app.so: tests/unit/cupti/mock_app.c $(OUTPUT)/tests/libcudart.so.13 \
		$(CUPTI_TEST_HDRS)
	$(call msg,MOCK,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(CUPTI_TEST_FLAGS) -shared -Wl,-z,now,-z,relro $< \
		-L$(OUTPUT)/tests -l:libnwmock_cuda.so -l:libcudart.so.13 -Wl,-rpath,'$$ORIGIN' -o $@

$(OUTPUT)/tests/libnwcupti_test.so: $(CUPTI_HOST_SRCS) tests/unit/cupti/fatbin_standin.c \
		$(CUPTI_TEST_HDRS) | $(OUTPUT)/tests
	$(call msg,LIB,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(CUPTI_TEST_FLAGS) -fvisibility=hidden -shared \
		$(filter %.c,$^) \
		-ldl -lpthread -o $@

$(OUTPUT)/tests/test_cupti_%: tests/unit/test_cupti_%.c tests/unit/cupti/daemon.c cupti/proto.c \
		$(CUPTI_MOCKS) $(OUTPUT)/tests/libnwcupti_test.so $(CUPTI_TEST_HDRS)
	$(call msg,TEST-CC,$@)
	$(Q)$(CC) $(CFLAGS) $(NW_CFLAGS) $(CUPTI_TEST_FLAGS) $(CUPTI_CUDA_INC:%=-idirafter %) $< \
		tests/unit/cupti/daemon.c cupti/proto.c \
		-L$(OUTPUT)/tests -l:libnwmock_cuda.so -l:libnwmock_cupti.so -Wl,-rpath,'$$ORIGIN' \
		-ldl -lpthread -lm -lcmocka -o $@

# Every BPF program loaded with every feature on, for each shipped pair of tables: the
# instructions the verifier processed (the kernel's limit is 1,000,000; older kernels need
# more for the same program, so ours stay well under it), each within its own budget.
VERIFIER_MAX := 200000
VERIFIER_LIMITS := bench/verifier-limits
LAYOUT_PAIRS := $(foreach p,3.11:1.13 3.13:2.6 3.12:2.11 3.14:2.14,config/layouts/python-$(firstword \
	$(subst :, ,$(p))).yaml config/layouts/torch-$(lastword $(subst :, ,$(p))).yaml)

verifier-stats: all
	$(Q)$(OUTPUT)/verifier-stats --max $(VERIFIER_MAX) --limits $(VERIFIER_LIMITS) \
		$(LAYOUT_PAIRS)

integration: all test-deps trixie-root forky-root $(SECURITY_BINS)
	$(Q)tests/integration/run $(PYTHON) $(OUTPUT)/nanwatchd $(TRIXIE_ROOT) $(FORKY_ROOT) \
		$(OUTPUT)/integration-roots.log

# Debian roots the integration tests also run trainers in: trixie (Python 3.13, torch 2.6),
# forky (Python 3.14, torch 2.14).
.PHONY: trixie-root forky-root
trixie-root: $(TRIXIE_ROOT)/.nanwatch-ready
forky-root: $(FORKY_ROOT)/.nanwatch-ready

$(TRIXIE_ROOT)/.nanwatch-ready:
	$(Q)scripts/make-root trixie $(TRIXIE_ROOT)

$(FORKY_ROOT)/.nanwatch-ready:
	$(Q)scripts/make-root forky $(FORKY_ROOT)

demo: all
	$(Q)scripts/demo

bench: all
	$(Q)$(PYTHON) bench/bench.py --daemon $(OUTPUT)/nanwatchd

# The systemd unit goes to PREFIX/lib/systemd/system (for /usr/local, systemd's path for
# locally installed units), its paths rewritten to this PREFIX; the example configuration to
# /etc/nanwatch, never over one already there.
install: all
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(OUTPUT)/nanwatchd $(DESTDIR)$(PREFIX)/sbin/nanwatchd
	install -m 0755 $(OUTPUT)/nanwatch-tail $(DESTDIR)$(PREFIX)/bin/nanwatch-tail
	install -m 0755 $(OUTPUT)/nanwatch-collect $(DESTDIR)$(PREFIX)/bin/nanwatch-collect
	install -m 0755 tools/nanwatch-layout $(DESTDIR)$(PREFIX)/bin/nanwatch-layout
	install -m 0755 tools/nanwatch-repro $(DESTDIR)$(PREFIX)/bin/nanwatch-repro
	install -m 0755 tools/nanwatch-report $(DESTDIR)$(PREFIX)/bin/nanwatch-report
	install -m 0755 tools/nanwatch-run $(DESTDIR)$(PREFIX)/bin/nanwatch-run
	for m in $(MAN_PAGES); do \
		sec=$${m##*.} && install -d $(DESTDIR)$(PREFIX)/share/man/man$$sec && \
		install -m 0644 $$m $(DESTDIR)$(PREFIX)/share/man/man$$sec/ || exit 1; \
	done
	install -d $(DESTDIR)$(PREFIX)/share/nanwatch/layouts
	install -m 0644 config/layouts/*.yaml $(DESTDIR)$(PREFIX)/share/nanwatch/layouts/
	install -m 0644 daemon/resolve/layout_keys.def $(DESTDIR)$(PREFIX)/share/nanwatch/layouts/
	test ! -f $(GPU_LIB) || { install -d $(DESTDIR)$(PREFIX)/lib/nanwatch && \
		install -m 0755 $(GPU_LIB) $(DESTDIR)$(PREFIX)/lib/nanwatch/libnanwatch_cupti.so; }
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/system
	sed 's#/usr/local/#$(PREFIX)/#g' config/nanwatchd.service > \
		$(DESTDIR)$(PREFIX)/lib/systemd/system/nanwatchd.service
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/nanwatchd.service
	install -d $(DESTDIR)$(PREFIX)/share/nanwatch
	install -m 0644 config/nanwatchd-learn.conf config/nanwatch-alerts.yml \
		$(DESTDIR)$(PREFIX)/share/nanwatch/
	install -d $(DESTDIR)/etc/nanwatch
	test -e $(DESTDIR)/etc/nanwatch/nanwatch.yaml || \
		install -m 0644 config/nanwatch.yaml $(DESTDIR)/etc/nanwatch/nanwatch.yaml

clean:
	rm -rf $(OUTPUT) $(ASAN_OUTPUT) $(FUZZ_OUTPUT)

-include $(wildcard $(OUTPUT)/*.d $(OUTPUT)/daemon/*.d $(OUTPUT)/daemon/*/*.d $(OUTPUT)/tests/*.d $(OUTPUT)/tools/tail/*.d \
	$(OUTPUT)/tools/collect/*.d $(OUTPUT)/cupti/*.d)
-include $(wildcard $(OUTPUT)/tests/inject/*.d)
