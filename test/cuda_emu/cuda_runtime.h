// cuda_runtime.h, the emulator's: runs train_gpt.cu on the CPU, for machines without a GPU.
//
// Why: the GPU trainer is written on machines that have the CUDA toolkit but no GPU, so its
// kernels and its host-side orchestration (streams, events, cuBLASLt descriptors, NCCL calls)
// would otherwise never run before the day a GPU is at hand. This directory shadows the CUDA,
// cuBLASLt and NCCL headers with a small emulator, g++ compiles train_gpt.cu against it (the
// `<<<grid, block, smem, stream>>>` launches rewritten to emu_launch(...) by the Makefile), and
// the very checks written for a GPU machine (test/gpu/run_gpu_checks.sh) run on the CPU.
//
// What is emulated, and what it checks on the way (each violation: one line "cuda_emu: ..." on
// stderr and abort):
//   threads    every CUDA thread is a fiber (a stack and a register switch); a block's fibers run round-robin on the
//              calling thread, switching only at __syncthreads and warp shuffles. Checks: a
//              __syncthreads that some threads of the block exited before; a shuffle whose warp
//              has exited lanes; a deadlock. (Which __syncthreads a thread waits at is not
//              compared: the compiler may duplicate one call into both arms of a branch.)
//   launches   the limits of real hardware (<= 1024 threads, grid.y/z <= 65535, no empty grid
//              or block) give cudaErrorInvalidConfiguration through cudaGetLastError; every
//              pointer argument must be NULL or point into a device allocation.
//   memory     cudaMalloc'd memory is mmap'd between guard pages and is inaccessible (PROT_NONE)
//              except while the emulated device runs: a host dereference of a device pointer, or
//              a kernel reading far outside its allocation, faults at once. The few bytes of
//              slack before the trailing guard page hold a canary that is checked at each sync.
//              Pinned host memory (cudaMallocHost) that an asynchronous copy will write is
//              inaccessible to the host, and memory a copy will read is read-only to it, until the
//              copy has run: a host that reads a copy's result, or overwrites its source, without
//              waiting for its event faults at once (page-granular; never a false alarm).
//   streams    operations are queued per stream and run only when the host must wait for one
//              (an event query or sync, a synchronous copy, a blocking free): the device is
//              "infinitely slow" until then, so a host that reads a result it did not wait for
//              sees stale data. A collective (nccl.h) is asynchronous to the host as on a GPU:
//              its stream starts it and then waits for the network, so an event behind one
//              whose peers have not all joined stays not ready (cudaEventQuery returns
//              cudaErrorNotReady, and the host's watchdog sees a collective that does not
//              complete), while syncs block until it completes. EMU_SCHEDULE=compute-first (default) runs the earliest-created
//              stream (train_gpt.cu's compute stream) as far as it can before any other, so
//              collectives run as late as their waits allow; EMU_SCHEDULE=comm-first runs the
//              later streams first, so collectives run as early as their events allow. A
//              missing event wait shows as a wrong result under one of the two.
//   cuBLASLt   (cublasLt.h) the documented column-major semantics, computed on the host in fp32;
//   NCCL       (nccl.h) over MPI, with NCCL's in-place conventions and 16-bit sums in fp32 that
//              round per pair.
//   WMMA       (mma.h) 16x16x16 fragments, every lane holding the whole tile; mma_sync checks
//              that the warp's lanes hold the same operands.
// Not emulated: timing, the memory model inside a warp beyond shuffles, __syncwarp and WMMA,
// dynamic shared memory, atomics (train_gpt.cu uses neither). Single-threaded per process: kernels never overlap.
#pragma once
#define __CUDACC__ 1          // the shared headers take their GPU-trainer branches
#define CUDA_EMULATOR 1
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)   // occupancy hints mean nothing to fibers
#define __shared__ static     // one block runs at a time, its fibers share the statics
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <deque>
#include <functional>
#include <tuple>
#include <type_traits>
#include <map>
#include <vector>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/asan_interface.h>
#endif

[[noreturn]] static void emu_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static inline void emu_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda_emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    abort();
}

// ---------------------------------------------------------------------------------------------
// Types and error codes (the values of the real headers, where code could depend on them)

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef enum cudaError {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9, cudaErrorInsufficientDriver = 35, cudaErrorInvalidDevice = 101, cudaErrorNoDevice = 100, cudaErrorNotReady = 600,
} cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType_t;
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount, warpSize, maxThreadsPerBlock;
};

static inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNotReady: return "device not ready";
    }
    return "unknown error";
}

// ---------------------------------------------------------------------------------------------
// Device memory: mmap'd, guard pages around, PROT_NONE while the host runs

struct EmuAlloc { char *map; size_t map_bytes, bytes; int device; }; // device 0: pinned host memory
static struct {
    std::map<uintptr_t, EmuAlloc> allocs; // by start address
    size_t device_bytes;                  // live cudaMalloc'd bytes, as asked
    int device_open;                      // the device is running: its memory is accessible
    size_t page;
} emu_mem;
static const size_t EMU_TOTAL_MEM = (size_t)16 << 30;
static const unsigned char EMU_CANARY = 0xA5;

static inline const EmuAlloc *emu_find(const void *p, int one_past_ok) {
    uintptr_t a = (uintptr_t)p;
    auto it = emu_mem.allocs.upper_bound(a);
    if (it == emu_mem.allocs.begin()) return NULL;
    --it;
    if (a < it->first + it->second.bytes + (one_past_ok ? 1 : 0)) return &it->second;
    return NULL;
}
static inline int emu_is_device(const void *p) { const EmuAlloc *e = emu_find(p, 0); return e && e->device; }
static inline void emu_protect_all(int prot) {
    for (auto &kv : emu_mem.allocs)
        if (kv.second.device && mprotect(kv.second.map + emu_mem.page, kv.second.map_bytes - 2 * emu_mem.page, prot))
            emu_fatal("mprotect failed");
}
static inline void emu_device_open(void) { if (!emu_mem.device_open++) emu_protect_all(PROT_READ | PROT_WRITE); }
static inline void emu_check_canaries(void) {
    for (auto &kv : emu_mem.allocs) {
        const EmuAlloc &e = kv.second;
        if (!e.device) continue;
        const unsigned char *end = (const unsigned char *)kv.first + e.bytes;
        const unsigned char *guard = (const unsigned char *)e.map + e.map_bytes - emu_mem.page;
        for (const unsigned char *c = end; c < guard; c++)
            if (*c != EMU_CANARY)
                emu_fatal("a write past the end of the %zu-byte device allocation at %p (offset %zu)", e.bytes,
                          (void *)kv.first, (size_t)(c - (const unsigned char *)kv.first));
    }
}
static inline void emu_device_close(void) {
    if (--emu_mem.device_open) return;
    emu_check_canaries();
    emu_protect_all(PROT_NONE);
}
// Pinned host pages with copies in flight: how many copies will write them (the host may not
// touch them) and read them (the host may not write them).
struct EmuPinnedPage { int writers, readers; };
static std::map<uintptr_t, EmuPinnedPage> emu_inflight;
static inline void emu_inflight_protect(uintptr_t page) {
    const EmuPinnedPage &e = emu_inflight[page];
    int prot = e.writers ? PROT_NONE : e.readers ? PROT_READ : PROT_READ | PROT_WRITE;
    if (mprotect((void *)page, emu_mem.page, prot)) emu_fatal("mprotect failed");
    if (!e.writers && !e.readers) emu_inflight.erase(page);
}
// A copy between device and pinned host memory is enqueued (writing: into the host) or has run.
static inline void emu_inflight_mark(const void *host, size_t bytes, int writing, int delta) {
    if (!bytes) return;
    uintptr_t pg = emu_mem.page, first = (uintptr_t)host / pg * pg, last = ((uintptr_t)host + bytes - 1) / pg * pg;
    for (uintptr_t p = first; p <= last; p += pg) {
        EmuPinnedPage &e = emu_inflight[p];
        if (writing) e.writers += delta;
        else e.readers += delta;
        emu_inflight_protect(p);
    }
}
// The copy itself runs: its host pages open for the memcpy, then closed again as far as other
// copies still in flight on them say.
static inline void emu_inflight_copy(void *dst, const void *src, size_t bytes, const void *host, int writing) {
    emu_inflight_mark(host, bytes, writing, -1);
    uintptr_t pg = emu_mem.page, first = (uintptr_t)host / pg * pg, last = ((uintptr_t)host + bytes - 1) / pg * pg;
    if (bytes && mprotect((void *)first, last - first + pg, PROT_READ | PROT_WRITE)) emu_fatal("mprotect failed");
    memcpy(dst, src, bytes);
    for (uintptr_t p = first; bytes && p <= last; p += pg)
        if (emu_inflight.count(p)) emu_inflight_protect(p);
}
// A fault in device memory or its guard pages gets a line saying what it probably was.
#include <signal.h>
static void emu_segv(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    uintptr_t a = (uintptr_t)si->si_addr;
    auto in = emu_inflight.find(a / emu_mem.page * emu_mem.page);
    if (in != emu_inflight.end()) {
        char msg[256];
        int n = snprintf(msg, sizeof(msg), "cuda_emu: the host touched pinned memory at %p that an asynchronous copy still "
                         "in flight %s: wait for the copy's event first\n", si->si_addr,
                         in->second.writers ? "writes" : "reads");
        if (write(2, msg, (size_t)n) < 0) {}
        signal(sig, SIG_DFL);
        raise(sig);
    }
    for (auto &kv : emu_mem.allocs) {
        const EmuAlloc &e = kv.second;
        if (!e.device || a < (uintptr_t)e.map || a >= (uintptr_t)e.map + e.map_bytes) continue;
        char msg[256];
        int n = emu_mem.device_open
                    ? snprintf(msg, sizeof(msg), "cuda_emu: a kernel or copy touched %p, outside the %zu-byte device allocation at %p\n",
                               si->si_addr, e.bytes, (void *)kv.first)
                    : snprintf(msg, sizeof(msg), "cuda_emu: the host touched device memory at %p (allocation %p, %zu bytes): "
                               "only kernels, copies and collectives may\n", si->si_addr, (void *)kv.first, e.bytes);
        if (write(2, msg, (size_t)n) < 0) {}
        break;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}
static void emu_install_segv(void) {
    static int done;
    if (done++) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = emu_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigaction(SIGSEGV, &sa, NULL);
}
// [guard page][.. slack (canary) | buffer, 256-byte aligned, ending just before ..][guard page]
static inline void *emu_map(size_t bytes, int device) {
    if (!emu_mem.page) emu_mem.page = (size_t)sysconf(_SC_PAGESIZE);
    emu_install_segv();
    size_t pg = emu_mem.page, body = (bytes + 255) / 256 * 256;
    size_t pages = (body + pg - 1) / pg, map_bytes = (pages + 2) * pg;
    char *m = (char *)mmap(NULL, map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return NULL;
    if (mprotect(m + pg, pages * pg, PROT_READ | PROT_WRITE)) emu_fatal("mprotect failed");
    char *p = m + pg + pages * pg - body;
    memset(p + bytes, EMU_CANARY, body - bytes);
    if (!device) memset(p, 0, bytes);
    else memset(p, 0x7F, bytes); // cudaMalloc does not zero: a kernel reading unwritten memory reads NaN-ish 0x7F7F
    emu_mem.allocs[(uintptr_t)p] = EmuAlloc{m, map_bytes, bytes, device};
    if (device && !emu_mem.device_open && mprotect(m + pg, pages * pg, PROT_NONE)) emu_fatal("mprotect failed");
    return p;
}
static inline void emu_unmap(void *p, int device, const char *fn) {
    if (!p) return;
    auto it = emu_mem.allocs.find((uintptr_t)p);
    if (it == emu_mem.allocs.end() || it->second.device != device)
        emu_fatal("%s(%p): not a pointer that %s returned", fn, p, device ? "cudaMalloc" : "cudaMallocHost");
    munmap(it->second.map, it->second.map_bytes);
    if (device) emu_mem.device_bytes -= it->second.bytes;
    emu_mem.allocs.erase(it);
}

// ---------------------------------------------------------------------------------------------
// Threads as fibers. One block runs at a time: its threads are fibers run round-robin by
// emu_run_block on the host thread, each until it finishes or waits at a barrier.

enum { EMU_READY, EMU_AT_SYNCTHREADS, EMU_AT_WARP, EMU_DONE };
struct EmuThread {
    void *sp; // saved stack pointer while it is switched out
    char *stack;
    uint3 idx;
    int linear, state;
};
static struct {
    std::vector<EmuThread> threads;
    std::vector<char *> stacks;
    EmuThread *cur;
    void *sched_sp;
    const std::function<void()> *body;
    const char *kernel;
    uint3 block_idx;
    dim3 block_dim, grid_dim;
    unsigned long long warp_slot[1024]; // __shfl_*_sync's exchange, by linear thread id
#if defined(__SANITIZE_ADDRESS__)
    void *fake_stack;
#endif
} emu_k;
static const size_t EMU_STACK = 256 << 10;

#define threadIdx (emu_k.cur->idx)
#define blockIdx (emu_k.block_idx)
#define blockDim (emu_k.block_dim)
#define gridDim (emu_k.grid_dim)

// The fiber switch: pushes the callee-saved registers (x86-64 System V: rbp, rbx, r12-r15), saves
// the stack pointer in *save, loads `to` and pops the other side's. Nothing else needs saving at
// a call boundary, so this is all a switch costs (ucontext's also saves the signal mask with a
// system call, which made the emulator 3x slower).
#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif
extern "C" void emu_fiber_switch(void **save, void *to);
__asm__(".text\n.globl emu_fiber_switch\n.type emu_fiber_switch,@function\nemu_fiber_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
        ".size emu_fiber_switch, .-emu_fiber_switch\n");
// Switches, told to AddressSanitizer when it is on: which stack is being entered (the host's is
// learnt on the first switch into a fiber), and its fake stacks follow the fibers.
#if defined(__SANITIZE_ADDRESS__)
static const void *emu_host_stack;
static size_t emu_host_stack_size;
#endif
static inline void emu_enter_fiber(EmuThread *t) { // scheduler -> fiber
#if defined(__SANITIZE_ADDRESS__)
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, t->stack, EMU_STACK);
    emu_fiber_switch(&emu_k.sched_sp, t->sp);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    emu_fiber_switch(&emu_k.sched_sp, t->sp);
#endif
}
static inline void emu_yield(void) { // fiber -> scheduler, on the host's own stack
    EmuThread *t = emu_k.cur;
#if defined(__SANITIZE_ADDRESS__)
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, emu_host_stack, emu_host_stack_size);
    emu_fiber_switch(&t->sp, emu_k.sched_sp);
    __sanitizer_finish_switch_fiber(fake, &emu_host_stack, &emu_host_stack_size);
#else
    emu_fiber_switch(&t->sp, emu_k.sched_sp);
#endif
}
static void emu_fiber_entry(void) {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(NULL, &emu_host_stack, &emu_host_stack_size);
#endif
    (*emu_k.body)();
    emu_k.cur->state = EMU_DONE;
    void *dead;
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_start_switch_fiber(NULL, emu_host_stack, emu_host_stack_size); // NULL: this fiber is done
#endif
    emu_fiber_switch(&dead, emu_k.sched_sp);
}
// A new fiber's stack as emu_fiber_switch leaves a switched-out one: six zero registers, then
// emu_fiber_entry as the return address, then a dummy return address for it (so that it starts
// with the stack alignment of a called function).
static inline void *emu_fiber_start(char *stack, size_t size) {
    uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
#if defined(__SANITIZE_ADDRESS__)
    // the previous fiber on this stack never returned from emu_fiber_entry: its frame's
    // redzones are still poisoned where the new one starts
    __asan_unpoison_memory_region((void *)(top - 4096), 4096);
#endif
    void **sp = (void **)top;
    *--sp = NULL;
    *--sp = (void *)emu_fiber_entry;
    for (int i = 0; i < 6; i++) *--sp = NULL;
    return sp;
}
static inline void __syncthreads(void) {
    emu_k.cur->state = EMU_AT_SYNCTHREADS;
    emu_yield();
}
// All 32 lanes of the caller's warp meet here (every shuffle in train_gpt.cu uses the full mask).
static inline void emu_warp_barrier(void) {
    emu_k.cur->state = EMU_AT_WARP;
    emu_yield();
}
static inline unsigned emu_lane(void) { return (unsigned)emu_k.cur->linear % 32u; }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) emu_fatal("__syncwarp in %s: mask %#x (the emulator supports full warps only)", emu_k.kernel, mask);
    emu_warp_barrier();
}
template <class T> static T emu_shfl(unsigned mask, T v, int src_lane, const char *fn) {
    static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
    if (mask != 0xffffffffu) emu_fatal("%s in %s: mask %#x (the emulator supports full warps only)", fn, emu_k.kernel, mask);
    unsigned long long bits = 0;
    memcpy(&bits, &v, sizeof(T));
    int base = emu_k.cur->linear & ~31;
    emu_k.warp_slot[emu_k.cur->linear] = bits;
    emu_warp_barrier();
    if (src_lane < 0 || src_lane > 31) src_lane = emu_lane(); // out of range: a lane reads its own value
    memcpy(&v, &emu_k.warp_slot[base + src_lane], sizeof(T));
    emu_warp_barrier(); // nobody overwrites its slot before every lane has read
    return v;
}
template <class T> static T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    if (width != 32) emu_fatal("__shfl_xor_sync width %d in %s: not emulated", width, emu_k.kernel);
    return emu_shfl(mask, v, (int)(emu_lane() ^ (unsigned)lane_mask), "__shfl_xor_sync");
}
template <class T> static T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    if (width != 32) emu_fatal("__shfl_down_sync width %d in %s: not emulated", width, emu_k.kernel);
    unsigned src = emu_lane() + delta;
    return emu_shfl(mask, v, src < 32 ? (int)src : (int)emu_lane(), "__shfl_down_sync");
}
template <class T> static T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
    if (width != 32) emu_fatal("__shfl_sync width %d in %s: not emulated", width, emu_k.kernel);
    return emu_shfl(mask, v, src_lane & 31, "__shfl_sync");
}

// Run one block: every thread to completion, releasing barriers when all their threads are there.
static inline void emu_run_block(void) {
    unsigned n = emu_k.block_dim.x * emu_k.block_dim.y * emu_k.block_dim.z;
    while (emu_k.stacks.size() < n) {
        char *s = (char *)mmap(NULL, EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (s == MAP_FAILED) emu_fatal("no memory for fiber stacks");
        emu_k.stacks.push_back(s);
    }
    emu_k.threads.resize(n);
    for (unsigned i = 0; i < n; i++) {
        EmuThread *t = &emu_k.threads[i];
        t->linear = (int)i;
        t->idx = uint3{i % emu_k.block_dim.x, i / emu_k.block_dim.x % emu_k.block_dim.y,
                       i / (emu_k.block_dim.x * emu_k.block_dim.y)};
        t->state = EMU_READY;
        t->stack = emu_k.stacks[i];
        t->sp = emu_fiber_start(t->stack, EMU_STACK);
    }
    for (;;) {
        int ran = 0;
        for (unsigned i = 0; i < n; i++) {
            EmuThread *t = &emu_k.threads[i];
            if (t->state != EMU_READY) continue;
            emu_k.cur = t;
            emu_enter_fiber(t);
            ran = 1;
        }
        emu_k.cur = NULL;
        // warps whose lanes all wait at a shuffle go on
        int released = 0, done = 0, at_sync = 0;
        for (unsigned w = 0; w < (n + 31) / 32; w++) {
            unsigned lo = w * 32, hi = lo + 32 < n ? lo + 32 : n, waiting = 0, exited = 0;
            for (unsigned i = lo; i < hi; i++) {
                waiting += emu_k.threads[i].state == EMU_AT_WARP;
                exited += emu_k.threads[i].state == EMU_DONE;
            }
            if (!waiting) continue;
            if (hi - lo < 32)
                emu_fatal("a shuffle in %s by a partial warp (block of %u threads, not a multiple of 32)", emu_k.kernel, n);
            if (waiting == 32) {
                for (unsigned i = lo; i < hi; i++) emu_k.threads[i].state = EMU_READY;
                released = 1;
            } else if (exited)
                emu_fatal("a shuffle in %s (block %u,%u,%u, warp %u) while %u lanes of its warp have exited", emu_k.kernel,
                          emu_k.block_idx.x, emu_k.block_idx.y, emu_k.block_idx.z, w, exited);
        }
        if (released || ran) continue;
        for (unsigned i = 0; i < n; i++) {
            done += emu_k.threads[i].state == EMU_DONE;
            at_sync += emu_k.threads[i].state == EMU_AT_SYNCTHREADS;
        }
        if (done == (int)n) return;
        if (at_sync + done == (int)n) {
            if (done)
                emu_fatal("__syncthreads in %s (block %u,%u,%u): %d of the block's %u threads have exited before it",
                          emu_k.kernel, emu_k.block_idx.x, emu_k.block_idx.y, emu_k.block_idx.z, done, n);
            for (unsigned i = 0; i < n; i++) emu_k.threads[i].state = EMU_READY;
            continue;
        }
        emu_fatal("deadlock in %s (block %u,%u,%u): threads wait at __syncthreads and at shuffles at once", emu_k.kernel,
                  emu_k.block_idx.x, emu_k.block_idx.y, emu_k.block_idx.z);
    }
}
static inline void emu_run_kernel(const char *name, dim3 grid, dim3 block, const std::function<void()> &body) {
    emu_k.kernel = name;
    emu_k.body = &body;
    emu_k.grid_dim = grid;
    emu_k.block_dim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                emu_k.block_idx = uint3{x, y, z};
                emu_run_block();
            }
}

// ---------------------------------------------------------------------------------------------
// Streams and events: queues of operations that run when the host has to wait for one of them

struct CUevent_st { unsigned long long recorded, completed; unsigned flags; double when; }; // when: host seconds at completion
typedef CUevent_st *cudaEvent_t;
struct EmuOp {
    enum { RUN, RECORD, WAIT, NET } kind;
    std::function<void()> fn;  // RUN
    cudaEvent_t ev;            // RECORD, WAIT
    unsigned long long gen;    // the record a WAIT waits for / a RECORD completes
    // NET (nccl.h's collectives): start() is run when the stream gets there (the device open)
    // and returns test, which says, without touching device memory, whether the network has
    // completed it; the stream goes on once it has.
    std::function<std::function<bool()>()> start;
    std::function<bool()> test;
};
struct CUstream_st { std::deque<EmuOp> q; int order; unsigned flags; };
typedef CUstream_st *cudaStream_t;
static struct {
    std::vector<cudaStream_t> streams; // in creation order
    cudaError_t last_error;
    int comm_first, schedule_read;
    int device_count_read;
} emu_dev;

static inline int emu_schedule_comm_first(void) {
    if (!emu_dev.schedule_read) {
        emu_dev.schedule_read = 1;
        const char *s = getenv("EMU_SCHEDULE");
        if (s && !strcmp(s, "comm-first")) emu_dev.comm_first = 1;
        else if (s && *s && strcmp(s, "compute-first")) emu_fatal("EMU_SCHEDULE=%s: use compute-first or comm-first", s);
    }
    return emu_dev.comm_first;
}
static inline cudaStream_t emu_stream(cudaStream_t s) {
    if (!s) emu_fatal("work on the legacy default stream: train_gpt.cu names its streams");
    return s;
}
static inline int emu_op_runnable(const EmuOp &op) { return op.kind != EmuOp::WAIT || op.ev->completed >= op.gen; }
static inline void emu_op_run(EmuOp &op) {
    if (op.kind == EmuOp::RUN) op.fn();
    else if (op.kind == EmuOp::RECORD && op.ev->completed < op.gen) {
        op.ev->completed = op.gen;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        op.ev->when = ts.tv_sec + 1e-9 * ts.tv_nsec;
    }
}
// Run queued operations, preferring streams in the schedule's order, until done() holds; true
// then. A stream whose next operation is a collective in the network (NET, started) waits for
// it while the others go on; when nothing else can, block (a sync) polls the network until
// done() holds, and otherwise (an event query) the call returns false: not ready. Device memory
// opens only for the operations that touch it (polling the network does not).
static inline bool emu_drain(const std::function<bool()> &done, const char *waiting_for, int block = 1) {
    int n = (int)emu_dev.streams.size(), comm_first = emu_schedule_comm_first(), open = 0, idle = 0;
    bool ok;
    while (!(ok = done())) {
        int progressed = 0, network = 0;
        for (cudaStream_t s : emu_dev.streams) // the network moves while kernels run, as a GPU's does
            if (!s->q.empty() && s->q.front().kind == EmuOp::NET && s->q.front().test && s->q.front().test()) {
                s->q.pop_front();
                progressed = 1;
            }
        for (int k = 0; k < n && !progressed; k++) {
            cudaStream_t s = emu_dev.streams[comm_first ? n - 1 - k : k];
            if (s->q.empty()) continue;
            EmuOp &head = s->q.front();
            if (head.kind == EmuOp::NET && head.test) { // in the network
                if (!head.test()) { network = 1; continue; }
                s->q.pop_front();
                progressed = 1;
                continue;
            }
            if (!emu_op_runnable(head)) continue;
            if (!open++) emu_device_open();
            if (head.kind == EmuOp::NET) { head.test = head.start(); progressed = 1; continue; }
            EmuOp op = std::move(head);
            s->q.pop_front();
            emu_op_run(op);
            progressed = 1;
        }
        if (progressed) { idle = 0; continue; }
        if (!network) emu_fatal("deadlock: waiting for %s, but every stream waits for an event that is never recorded "
                                "or whose record waits itself", waiting_for);
        if (!block) break;
        if (++idle > 100) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
    }
    if (open) emu_device_close();
    return ok;
}
static inline void emu_drain_stream(cudaStream_t s, const char *what) {
    emu_drain([s] { return s->q.empty(); }, what);
}
static inline void emu_drain_all(const char *what) {
    emu_drain([] { for (cudaStream_t s : emu_dev.streams) if (!s->q.empty()) return false; return true; }, what);
}
// Work for stream s: fn runs when the stream gets there (RUN), or start begins a collective (NET).
static inline void emu_enqueue_op(cudaStream_t s, std::function<void()> fn, std::function<std::function<bool()>()> start) {
    EmuOp op;
    op.kind = start ? EmuOp::NET : EmuOp::RUN;
    op.fn = std::move(fn);
    op.start = std::move(start);
    op.ev = NULL;
    op.gen = 0;
    emu_stream(s)->q.push_back(std::move(op));
}
static inline void emu_enqueue(cudaStream_t s, std::function<void()> fn) { emu_enqueue_op(s, std::move(fn), nullptr); }
static inline void emu_enqueue_net(cudaStream_t s, std::function<std::function<bool()>()> start) {
    emu_enqueue_op(s, nullptr, std::move(start));
}

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    *s = new CUstream_st();
    (*s)->order = (int)emu_dev.streams.size();
    (*s)->flags = flags;
    emu_dev.streams.push_back(*s);
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { emu_drain_stream(emu_stream(s), "cudaStreamSynchronize"); return cudaSuccess; }
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { // completes its work first, as CUDA does
    emu_drain_stream(emu_stream(s), "cudaStreamDestroy");
    for (size_t i = 0; i < emu_dev.streams.size(); i++)
        if (emu_dev.streams[i] == s) emu_dev.streams.erase(emu_dev.streams.begin() + (long)i);
    delete s;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize(void) { emu_drain_all("cudaDeviceSynchronize"); return cudaSuccess; }
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    *e = new CUevent_st();
    (*e)->flags = flags;
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
// CUDA lets an event be destroyed while a record of it is queued; the emulator keeps it (a few bytes).
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    EmuOp op;
    op.kind = EmuOp::RECORD;
    op.ev = e;
    op.gen = ++e->recorded;
    emu_stream(s)->q.push_back(std::move(op));
    return cudaSuccess;
}
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    (void)flags;
    EmuOp op;
    op.kind = EmuOp::WAIT;
    op.ev = e;
    op.gen = e->recorded; // the most recent record at the time of the call (0: none, no wait)
    emu_stream(s)->q.push_back(std::move(op));
    return cudaSuccess;
}
// The device gets there when the host asks: the record and what precedes it run now, as far
// as the network lets them (a collective not yet completed: cudaErrorNotReady).
static inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    return emu_drain([e] { return e->completed >= e->recorded; }, "an event (cudaEventQuery)", 0) ? cudaSuccess
                                                                                                  : cudaErrorNotReady;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    emu_drain([e] { return e->completed >= e->recorded; }, "an event (cudaEventSynchronize)");
    return cudaSuccess;
}
// The milliseconds between two completed records (the emulator's: host time, as its streams ran
// them). CUDA refuses events made with cudaEventDisableTiming, and events not yet recorded or
// not yet complete: so does the emulator (the caller must have waited).
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if ((a->flags | b->flags) & cudaEventDisableTiming)
        emu_fatal("cudaEventElapsedTime on an event created with cudaEventDisableTiming");
    if (!a->recorded || !b->recorded || a->completed < a->recorded || b->completed < b->recorded)
        emu_fatal("cudaEventElapsedTime on an event not recorded, or not complete (wait for it first)");
    *ms = (float)((b->when - a->when) * 1e3);
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Memory and copies

static inline cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (emu_mem.device_bytes + bytes > EMU_TOTAL_MEM) { *p = NULL; return cudaErrorMemoryAllocation; }
    *p = emu_map(bytes ? bytes : 1, 1);
    if (!*p) return cudaErrorMemoryAllocation;
    emu_mem.device_bytes += bytes;
    return cudaSuccess;
}
template <class T> static cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
static inline cudaError_t cudaFree(void *p) { // synchronises the device, as CUDA's does
    emu_drain_all("cudaFree");
    emu_unmap(p, 1, "cudaFree");
    return cudaSuccess;
}
static inline cudaError_t cudaMallocHost(void **p, size_t bytes) {
    *p = emu_map(bytes ? bytes : 1, 0);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T> static cudaError_t cudaMallocHost(T **p, size_t bytes) { return cudaMallocHost((void **)p, bytes); }
static inline cudaError_t cudaFreeHost(void *p) { emu_drain_all("cudaFreeHost"); emu_unmap(p, 0, "cudaFreeHost"); return cudaSuccess; }
// Stream-ordered: the memory is handed out now and given back when the stream gets to the free.
static inline cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s) { (void)emu_stream(s); return cudaMalloc(p, bytes); }
template <class T> static cudaError_t cudaMallocAsync(T **p, size_t bytes, cudaStream_t s) { return cudaMallocAsync((void **)p, bytes, s); }
static inline cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    if (!emu_is_device(p)) emu_fatal("cudaFreeAsync(%p): not device memory", p);
    emu_enqueue(s, [p] { emu_unmap(p, 1, "cudaFreeAsync"); });
    return cudaSuccess;
}
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *total = EMU_TOTAL_MEM;
    *free_b = EMU_TOTAL_MEM - emu_mem.device_bytes;
    return cudaSuccess;
}
// The direction must be what the pointers are, and a device range must lie in one allocation.
static inline void emu_check_range(const void *p, size_t bytes, int device, const char *fn, const char *which) {
    const EmuAlloc *e = emu_find(p, 0);
    if (device) {
        if (!e || !e->device) emu_fatal("%s: the %s %p is not device memory", fn, which, p);
    } else if (e && e->device) {
        emu_fatal("%s: the %s %p is device memory, the copy's kind says host", fn, which, p);
    }
    if (e) {
        auto it = emu_mem.allocs.upper_bound((uintptr_t)p);
        --it;
        if ((uintptr_t)p + bytes > it->first + e->bytes)
            emu_fatal("%s: %zu bytes from the %s %p run past the end of its %zu-byte allocation (offset %zu)", fn, bytes,
                      which, p, e->bytes, (size_t)((uintptr_t)p - it->first));
    }
}
static inline int emu_is_pinned(const void *p) { const EmuAlloc *e = emu_find(p, 0); return e && !e->device; }
static inline void emu_check_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *fn) {
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice)
        emu_fatal("%s: copy kind %d is not emulated", fn, (int)kind);
    emu_check_range(dst, bytes, kind != cudaMemcpyDeviceToHost, fn, "destination");
    emu_check_range(src, bytes, kind != cudaMemcpyHostToDevice, fn, "source");
}
// Asynchronous as in CUDA: with pinned host memory the copy happens when the stream gets there;
// from pageable memory the source is read before the call returns, into pageable memory the
// call returns once the copy is done (CUDA stages both through its own pinned buffers).
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    emu_check_copy(dst, src, bytes, kind, "cudaMemcpyAsync");
    if (kind == cudaMemcpyHostToDevice && !emu_is_pinned(src)) {
        std::vector<char> copy((const char *)src, (const char *)src + bytes);
        emu_enqueue(s, [dst, copy] { memcpy(dst, copy.data(), copy.size()); });
        return cudaSuccess;
    }
    if (kind == cudaMemcpyDeviceToHost && emu_is_pinned(dst)) { // the host may not touch dst until the copy runs
        emu_inflight_mark(dst, bytes, 1, +1);
        emu_enqueue(s, [dst, src, bytes] { emu_inflight_copy(dst, src, bytes, dst, 1); });
        return cudaSuccess;
    }
    if (kind == cudaMemcpyHostToDevice) { // pinned: the host may not write src until the copy has read it
        emu_inflight_mark(src, bytes, 0, +1);
        emu_enqueue(s, [dst, src, bytes] { emu_inflight_copy(dst, src, bytes, src, 0); });
        return cudaSuccess;
    }
    emu_enqueue(s, [dst, src, bytes] { memcpy(dst, src, bytes); });
    if (kind == cudaMemcpyDeviceToHost && !emu_is_pinned(dst)) emu_drain_stream(s, "cudaMemcpyAsync to pageable memory");
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    emu_check_copy(dst, src, bytes, kind, "cudaMemcpy");
    emu_drain_all("cudaMemcpy");
    emu_device_open();
    memcpy(dst, src, bytes);
    emu_device_close();
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
    emu_check_range(p, bytes, 1, "cudaMemsetAsync", "pointer");
    emu_enqueue(s, [p, value, bytes] { memset(p, value, bytes); });
    return cudaSuccess;
}
// On the legacy default stream, which waits for the other (blocking) streams: here, for all.
static inline cudaError_t cudaMemset(void *p, int value, size_t bytes) {
    emu_check_range(p, bytes, 1, "cudaMemset", "pointer");
    emu_drain_all("cudaMemset");
    emu_device_open();
    memset(p, value, bytes);
    emu_device_close();
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// The device

static inline cudaError_t cudaGetDeviceCount(int *n) {
    // EMU_DEVICES=0: a machine with NVIDIA's driver but no GPU; =nodriver: without the driver (what
    // CUDA's runtime says on an ordinary machine)
    // (default 16: each process emulates a GPU of its own, as many as the tests start on one node;
    // EMU_DEVICES=N: N GPUs per node, so that more processes than that must be refused)
    const char *s = getenv("EMU_DEVICES");
    *n = s ? atoi(s) : 16;
    if (s && !strcmp(s, "nodriver")) return cudaErrorInsufficientDriver;
    return *n > 0 ? cudaSuccess : cudaErrorNoDevice;
}
static inline cudaError_t cudaSetDevice(int d) { int n; cudaGetDeviceCount(&n); return d >= 0 && d < n ? cudaSuccess : cudaErrorInvalidDevice; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    int n;
    cudaGetDeviceCount(&n);
    if (d < 0 || d >= n) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "zero.c CUDA emulator (CPU)");
    p->totalGlobalMem = EMU_TOTAL_MEM;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 2; // few: grid-stride kernels get few blocks, each thread loops more
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
static inline cudaError_t cudaGetLastError(void) { cudaError_t e = emu_dev.last_error; emu_dev.last_error = cudaSuccess; return e; }
static inline cudaError_t cudaPeekAtLastError(void) { return emu_dev.last_error; }

// ---------------------------------------------------------------------------------------------
// Launches: kernel<<<grid, block, smem, stream>>>(args) is rewritten by the Makefile to
// emu_launch(kernel, "kernel", grid, block, smem, stream)(args). The arguments are copied when
// the launch is made, as CUDA copies them; the kernel runs when the stream gets to it.

static inline void emu_check_arg(const char *kernel, int i, const void *p) {
    if (p && !emu_find(p, 1)) emu_fatal("launch of %s: pointer argument %d (%p) is not in any device allocation", kernel, i, p);
    if (p && !emu_find(p, 1)->device) emu_fatal("launch of %s: pointer argument %d (%p) is host memory", kernel, i, p);
}
template <class T> static void emu_check_args(const char *k, int i, T *p) { emu_check_arg(k, i, (const void *)p); }
template <class T> static void emu_check_args(const char *, int, const T &) {}
template <class... P> struct EmuLaunch {
    void (*kernel)(P...);
    const char *name;
    dim3 grid, block;
    cudaStream_t stream;
    // The kernel's own parameter types: arguments convert as in a call (NULL to a pointer).
    void operator()(P... args) const {
        unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
        if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024 || block.z > 64 || grid.x > 2147483647u ||
            grid.y > 65535 || grid.z > 65535) {
            emu_dev.last_error = cudaErrorInvalidConfiguration;
            return;
        }
        int i = 0;
        (emu_check_args(name, i++, args), ...);
        std::function<void()> body = [k = kernel, tup = std::tuple<P...>(args...)] { std::apply(k, tup); };
        const char *n = name;
        dim3 g = grid, b = block;
        emu_enqueue(stream, [n, g, b, body] { emu_run_kernel(n, g, b, body); });
    }
};
template <class... P>
static EmuLaunch<P...> emu_launch(void (*kernel)(P...), const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s) {
    if (smem) emu_fatal("launch of %s: dynamic shared memory is not emulated", name);
    return EmuLaunch<P...>{kernel, name, grid, block, emu_stream(s)};
}

// Device math that is not in <math.h>
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline int min(int a, int b) { return a < b ? a : b; } // CUDA's integer min/max
static inline int max(int a, int b) { return a > b ? a : b; }
