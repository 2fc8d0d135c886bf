/*
 * ncclbench's NCCL profiler plugin: records NCCL's own choice for each collective
 * (algorithm, protocol, channels) while ncclbench lets it, for ctypes to drain.
 *
 * Why a plugin: from NCCL 2.23 the profiler API hands a plugin, per collective, the
 * algorithm/protocol/nChannels NCCL chose (src/plugin/profiler.cc,
 * ncclProfilerStartTaskEvents, v2.28.9-1), without any log text.  NCCL finds the plugin
 * by NCCL_PROFILER_PLUGIN=<path> and looks up the data symbols ncclProfiler_v6,
 * _v5, _v4 (newest first), so this one file serves NCCL 2.27 (API v4), 2.28 (v5)
 * and 2.29+ (v6).
 *
 * Nothing is recorded unless ncclbench turns it on: init() leaves NCCL's activation
 * mask at what ncclbench_profiler_set_mask() last set (0 at start), and NCCL reads
 * that mask (one process-wide int whose address init() receives) at every API call.
 * ncclbench sets it to ncclProfileColl around untimed probe operations only, so the
 * timed loop runs with the mask at 0 and NCCL calls into the plugin not at all.
 *
 * The declarations below are ncclbench's own, written to the published ABI of NCCL's
 * profiler API (ext-profiler/example/nccl/profiler_v4.h, profiler_v5.h at v2.28.9-1;
 * plugins/profiler/example/nccl/profiler_v6.h at v2.30.7-1): only the parts this
 * plugin reads.  The coll member of the event descriptor union has the same layout in
 * v4, v5 and v6, at the same offset (24 on LP64).
 */

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NB_EXPORT __attribute__((visibility("default")))
#define NB_ABI 1
#define NB_RING 4096
#define NB_MAX_MASKS 16
#define NB_PROFILE_COLL (1 << 1) /* ncclProfileColl */

typedef int nb_result_t; /* ncclResult_t; 0 is ncclSuccess */
typedef void (*nb_logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

struct nb_coll_descr {
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;
  const char* proto;
};

struct nb_descr_v4 { /* ncclProfilerEventDescr_v4_t: uint8_t type */
  uint8_t type;
  void* parentObj;
  int rank;
  union { struct nb_coll_descr coll; } u;
};

struct nb_descr_v5 { /* ncclProfilerEventDescr_v5_t and _v6_t: uint64_t type */
  uint64_t type;
  void* parentObj;
  int rank;
  union { struct nb_coll_descr coll; } u;
};

struct nb_profiler_v4 {
  const char* name;
  nb_result_t (*init)(void** context, int* eActivationMask, const char* commName, uint64_t commHash, int nNodes,
                      int nranks, int rank, nb_logger_t logfn);
  nb_result_t (*startEvent)(void* context, void** eHandle, struct nb_descr_v4* eDescr);
  nb_result_t (*stopEvent)(void* eHandle);
  nb_result_t (*recordEventState)(void* eHandle, int eState, void* eStateArgs);
  nb_result_t (*finalize)(void* context);
};

struct nb_profiler_v5 { /* v6 has the same shape, with the v6 descriptor */
  const char* name;
  nb_result_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                      int nranks, int rank, nb_logger_t logfn);
  nb_result_t (*startEvent)(void* context, void** eHandle, struct nb_descr_v5* eDescr);
  nb_result_t (*stopEvent)(void* eHandle);
  nb_result_t (*recordEventState)(void* eHandle, int eState, void* eStateArgs);
  nb_result_t (*finalize)(void* context);
};

/* One collective as NCCL described it; mirrored by explain/profiler.py (CollRecord). */
typedef struct {
  uint64_t comm_id; /* v5/v6: commId given to init; v4: commHash */
  uint64_t seq_number;
  uint64_t count;
  int32_t rank;
  int32_t nranks;
  int32_t root;
  uint8_t n_channels;
  uint8_t n_warps;
  uint8_t api_version;
  uint8_t reserved;
  char func[24];
  char algo[24];
  char proto[16];
  char datatype[24];
} nb_coll_record;

struct nb_context {
  uint64_t comm_id;
  int rank, nranks, nnodes, api_version;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static nb_coll_record ring[NB_RING];
static uint64_t head, tail, dropped;
static int* masks[NB_MAX_MASKS];
static int nmasks;
static int wanted_mask;
static int live_comms;
static int last_api;

static void copy_str(char* dst, size_t n, const char* src) {
  if (src == NULL) src = "";
  strncpy(dst, src, n - 1);
  dst[n - 1] = '\0';
}

static void remember_mask(int* mask) {
  int i;
  for (i = 0; i < nmasks; i++)
    if (masks[i] == mask) return;
  if (nmasks < NB_MAX_MASKS) masks[nmasks++] = mask;
}

static nb_result_t start_init(void** context, uint64_t comm_id, int* mask, int nnodes, int nranks, int rank, int api) {
  struct nb_context* ctx = calloc(1, sizeof(*ctx));
  if (ctx == NULL) return 1; /* ncclSystemError would be 2; any non-zero makes NCCL go on without us */
  ctx->comm_id = comm_id;
  ctx->rank = rank;
  ctx->nranks = nranks;
  ctx->nnodes = nnodes;
  ctx->api_version = api;
  pthread_mutex_lock(&lock);
  if (mask != NULL) {
    remember_mask(mask);
    __atomic_store_n(mask, wanted_mask, __ATOMIC_RELAXED);
  }
  live_comms++;
  last_api = api;
  pthread_mutex_unlock(&lock);
  *context = ctx;
  return 0;
}

static void record_coll(struct nb_context* ctx, int rank, const struct nb_coll_descr* c) {
  pthread_mutex_lock(&lock);
  if (head - tail >= NB_RING) {
    dropped++;
  } else {
    nb_coll_record* r = &ring[head % NB_RING];
    memset(r, 0, sizeof(*r));
    r->comm_id = ctx ? ctx->comm_id : 0;
    r->seq_number = c->seqNumber;
    r->count = c->count;
    r->rank = rank;
    r->nranks = ctx ? ctx->nranks : 0;
    r->root = c->root;
    r->n_channels = c->nChannels;
    r->n_warps = c->nWarps;
    r->api_version = (uint8_t)(ctx ? ctx->api_version : 0);
    copy_str(r->func, sizeof(r->func), c->func);
    copy_str(r->algo, sizeof(r->algo), c->algo);
    copy_str(r->proto, sizeof(r->proto), c->proto);
    copy_str(r->datatype, sizeof(r->datatype), c->datatype);
    head++;
  }
  pthread_mutex_unlock(&lock);
}

static nb_result_t init_v4(void** context, int* mask, const char* name, uint64_t comm_hash, int nnodes, int nranks,
                           int rank, nb_logger_t logfn) {
  (void)name; (void)logfn;
  return start_init(context, comm_hash, mask, nnodes, nranks, rank, 4);
}

static nb_result_t init_v5(void** context, uint64_t comm_id, int* mask, const char* name, int nnodes, int nranks,
                           int rank, nb_logger_t logfn) {
  (void)name; (void)logfn;
  return start_init(context, comm_id, mask, nnodes, nranks, rank, 5);
}

static nb_result_t init_v6(void** context, uint64_t comm_id, int* mask, const char* name, int nnodes, int nranks,
                           int rank, nb_logger_t logfn) {
  (void)name; (void)logfn;
  return start_init(context, comm_id, mask, nnodes, nranks, rank, 6);
}

static nb_result_t start_v4(void* context, void** handle, struct nb_descr_v4* d) {
  if (handle) *handle = NULL; /* no child events: NCCL skips stop for a NULL handle */
  if (d != NULL && d->type == NB_PROFILE_COLL) record_coll(context, d->rank, &d->u.coll);
  return 0;
}

static nb_result_t start_v5(void* context, void** handle, struct nb_descr_v5* d) {
  if (handle) *handle = NULL;
  if (d != NULL && d->type == NB_PROFILE_COLL) record_coll(context, d->rank, &d->u.coll);
  return 0;
}

static nb_result_t stop_event(void* handle) { (void)handle; return 0; }

static nb_result_t record_state(void* handle, int state, void* args) {
  (void)handle; (void)state; (void)args;
  return 0;
}

static nb_result_t finalize(void* context) {
  pthread_mutex_lock(&lock);
  if (live_comms > 0) live_comms--;
  pthread_mutex_unlock(&lock);
  free(context);
  return 0;
}

NB_EXPORT struct nb_profiler_v4 ncclProfiler_v4 = {"ncclbench", init_v4, start_v4, stop_event, record_state, finalize};
NB_EXPORT struct nb_profiler_v5 ncclProfiler_v5 = {"ncclbench", init_v5, start_v5, stop_event, record_state, finalize};
NB_EXPORT struct nb_profiler_v5 ncclProfiler_v6 = {"ncclbench", init_v6, start_v5, stop_event, record_state, finalize};

/* ---- ncclbench's side (ctypes) ---- */

NB_EXPORT int ncclbench_profiler_abi(void) { return NB_ABI; }

NB_EXPORT int ncclbench_profiler_record_size(void) { return (int)sizeof(nb_coll_record); }

/* NCCL's activation mask for every communicator from its next API call on (0: off). */
NB_EXPORT void ncclbench_profiler_set_mask(int mask) {
  int i;
  pthread_mutex_lock(&lock);
  wanted_mask = mask;
  for (i = 0; i < nmasks; i++) __atomic_store_n(masks[i], mask, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&lock);
}

NB_EXPORT int ncclbench_profiler_get_mask(void) { return __atomic_load_n(&wanted_mask, __ATOMIC_RELAXED); }

/* Copy out up to `max` records, oldest first; returns how many. */
NB_EXPORT int ncclbench_profiler_drain(nb_coll_record* out, int max) {
  int n = 0;
  pthread_mutex_lock(&lock);
  while (tail < head && n < max) {
    out[n++] = ring[tail % NB_RING];
    tail++;
  }
  pthread_mutex_unlock(&lock);
  return n;
}

NB_EXPORT uint64_t ncclbench_profiler_dropped(void) { return __atomic_load_n(&dropped, __ATOMIC_RELAXED); }

NB_EXPORT int ncclbench_profiler_live_comms(void) { return __atomic_load_n(&live_comms, __ATOMIC_RELAXED); }

NB_EXPORT int ncclbench_profiler_api_version(void) { return __atomic_load_n(&last_api, __ATOMIC_RELAXED); }
