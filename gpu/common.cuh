// gpu/common.cuh: what every piece of the GPU trainer uses: the error checks (one line naming the
// call, the rank and the place, then the job ends), the device state (one process drives one GPU),
// launch geometry. Included by train_gpt.cu after the CUDA, cuBLASLt, NCCL and MPI headers and its
// floatX (the compiled storage type).
#ifndef GPU_COMMON_CUH
#define GPU_COMMON_CUH


// ----------------------------------------------------------------------------------------
// Utilities

static void gpu_fatal(const char *what, const char *detail, const char *file, int line) {
    int rank = 0, init = 0;
    MPI_Initialized(&init);
    if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "error: rank %d: %s failed: %s (%s:%d)\n", rank, what, detail, file, line);
    if (init) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}
#define CUDA_CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) gpu_fatal(#x, cudaGetErrorString(e_), __FILE__, __LINE__); } while (0)
#define CUBLAS_CHECK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { char m_[32]; snprintf(m_, sizeof(m_), "cuBLAS status %d", (int)s_); gpu_fatal(#x, m_, __FILE__, __LINE__); } } while (0)
#define NCCL_CHECK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) gpu_fatal(#x, ncclGetErrorString(r_), __FILE__, __LINE__); } while (0)
// After a launch: configuration errors show at once; faults show at the next sync.
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

// The device state every kernel launch and matmul uses: one process drives one GPU. The run
// owns it (train_gpt.cu's main); the backend and the kernels' context point at it.
typedef struct {
    int device, sm_count;
    cudaDeviceProp prop;
    cudaStream_t compute;      // every kernel and matmul
    cublasLtHandle_t lt;
    void *workspace;           // cuBLASLt's
    size_t workspace_bytes;
    struct KProf *prof;        // --profile-kernels (gpu/profile.cuh); NULL or off: nothing is timed
} Gpu;

// The batch's positions grouped by token, for the embedding's backward (train_gpt.cu's
// upload_batch builds them): `count` groups, group k is token tok[k] at positions
// pos[start[k]] .. pos[start[k+1]-1]. Device pointers.
typedef struct { const int *start, *pos, *tok; int count; } TokenGroups;

// The kernels' per-run context, which model.h hands to every kernel wrapper: the device (its
// compute stream, cuBLASLt), the matmul plans (gpu/matmul.cuh), the backend whose watchdog the
// host's waits go through, and the batch's token groups.
struct MatmulPlans;
struct NcclBackend;
// scratch: device memory for kernels' intermediate results (the column sums' partials), allocated
// once by gpt2_build for the largest use; every user runs on the compute stream, so uses follow
// one another and share it.
typedef struct {
    Gpu *gpu;
    struct MatmulPlans *plans;
    struct NcclBackend *comm;
    TokenGroups groups;
    float *scratch;            // the kernels' scratch: column sums' partials, attention's D = rowsum(dY*Y) (B,NH,T)
    size_t scratch_floats;
} GpuKernels;

static inline unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }
// Grid for a grid-stride elementwise loop: enough blocks to fill the GPU, never zero.
static inline unsigned grid_for(const Gpu *gpu, size_t n, int block) {
    size_t want = (n + block - 1) / block, cap = (size_t)gpu->sm_count * 32;
    if (want > cap) want = cap;
    return want ? (unsigned)want : 1u;
}

// Whether a device pointer may be read or written 16 bytes at a time (the kernels' VEC loads).
static inline int vec_ok(const void *p) { return ((uintptr_t)p & 15) == 0; }

#endif // GPU_COMMON_CUH
