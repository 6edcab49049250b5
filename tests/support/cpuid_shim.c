/* What one library of the process sees of the CPU, edited: an LD_PRELOAD shim for
 * tests/test_same_bytes.py (issue 49), which forces Embree (inside libOpen3D) onto the
 * kernels of another x86-64 CPU.
 *
 * Linux CPUID faulting (arch_prctl ARCH_SET_CPUID, 0; the `cpuid_fault` CPU flag) makes
 * every CPUID instruction of the process raise SIGSEGV. The handler executes the real
 * CPUID with faulting briefly off, edits the answer when the instruction lies in a module
 * whose path contains $CPUID_SHIM_MODULE, writes it into the registers and steps over
 * the two-byte instruction. Any other SIGSEGV gets the default action.
 *
 *   CPUID_SHIM_MODULE=libOpen3D   whose CPUID is edited (required)
 *   CPUID_SHIM_NO_AVX2=1          leaf 7: no AVX2 (Embree takes its AVX kernels)
 *   CPUID_SHIM_NO_AVX512=1        leaf 7: no AVX-512 F, DQ, CD, BW, VL
 *   CPUID_SHIM_MODEL=0x55         leaf 1: Intel family 6, this model (Embree's BVH width)
 *   CPUID_SHIM_REPORT=path        at exit, "<edited> <all>" CPUID calls written there
 *
 * Build: gcc -O2 -shared -fPIC -o cpuid_shim.so cpuid_shim.c -ldl
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define SET_CPUID 0x1012 /* ARCH_SET_CPUID, <asm/prctl.h> */

static struct {
    const char *module;
    int no_avx2, no_avx512, model;
    volatile long edited, seen;
    int active;
} cfg = {.model = -1};

static int faulting(int on) { return (int)syscall(SYS_arch_prctl, SET_CPUID, on ? 0 : 1); }

static int in_module(const void *ip) {
    Dl_info info;
    return dladdr(ip, &info) && info.dli_fname && strstr(info.dli_fname, cfg.module);
}

static void edit(unsigned leaf, unsigned sub, unsigned r[4]) {
    if (leaf == 1 && cfg.model >= 0) { /* EAX: stepping 3:0, model 7:4, family 11:8, ext. model 19:16 */
        r[0] = (r[0] & 0xF000F00Fu) | (6u << 8) | ((unsigned)(cfg.model & 0xF) << 4)
               | ((unsigned)((cfg.model >> 4) & 0xF) << 16);
        r[0] &= ~0x0FF00000u; /* extended family 0 */
    }
    if (leaf == 7 && sub == 0) { /* EBX */
        if (cfg.no_avx2) r[1] &= ~(1u << 5);
        if (cfg.no_avx512)
            r[1] &= ~((1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31));
    }
}

static void on_fault(int sig, siginfo_t *si, void *context) {
    (void)si;
    greg_t *reg = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)reg[REG_RIP];
    if (ip[0] != 0x0F || ip[1] != 0xA2) { /* not CPUID: a real fault */
        signal(sig, SIG_DFL);
        return; /* the instruction faults again, now fatally */
    }
    unsigned leaf = (unsigned)reg[REG_RAX], sub = (unsigned)reg[REG_RCX], r[4];
    faulting(0);
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
    faulting(1);
    cfg.seen++;
    if (in_module(ip)) {
        edit(leaf, sub, r);
        cfg.edited++;
    }
    reg[REG_RAX] = r[0];
    reg[REG_RBX] = r[1];
    reg[REG_RCX] = r[2];
    reg[REG_RDX] = r[3];
    reg[REG_RIP] += 2;
}

__attribute__((constructor)) static void start(void) {
    cfg.module = getenv("CPUID_SHIM_MODULE");
    if (!cfg.module || !*cfg.module) return;
    cfg.no_avx2 = getenv("CPUID_SHIM_NO_AVX2") != NULL;
    cfg.no_avx512 = getenv("CPUID_SHIM_NO_AVX512") != NULL;
    if (getenv("CPUID_SHIM_MODEL")) cfg.model = (int)strtol(getenv("CPUID_SHIM_MODEL"), NULL, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    if (faulting(1) != 0) {
        perror("cpuid_shim: arch_prctl(ARCH_SET_CPUID)");
        _exit(3);
    }
    cfg.active = 1;
}

__attribute__((destructor)) static void stop(void) {
    const char *path = getenv("CPUID_SHIM_REPORT");
    if (!cfg.active || !path) return;
    char line[64];
    int n = snprintf(line, sizeof line, "%ld %ld\n", cfg.edited, cfg.seen);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) < 0) perror("cpuid_shim: report");
        close(fd);
    }
}
