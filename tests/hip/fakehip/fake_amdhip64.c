/*
 * A fake libamdhip64.so for rocmseat's tier-3 tests (no GPU needed).
 *
 * It implements the HIP subset rocmseat.hip.api binds, on host memory:
 *   - "device memory" is a POSIX shared memory object (shm_open + mmap), so an IPC handle can
 *     carry the object's name, size, owner pid and owner device, and another process can open it;
 *   - each device has a modelled timeline that hipEvent* read: a copy over a device's host link
 *     advances it by bytes / FAKEHIP_HOST_GBPS, a copy through an opened IPC handle by
 *     bytes / FAKEHIP_D2D_GBPS; a device with no configured rate advances by the real wall time.
 *
 * Return codes and their enum names are HIP's (ROCm/HIP include/hip/hip_runtime_api.h), and the
 * IPC rules follow CLR hipamd/src/hip_memory.cpp (and include/hip/hip_runtime_api.h):
 * a bad flag or size is hipErrorInvalidValue (1), opening a handle in the exporting process is
 * hipErrorInvalidContext (201), a failed attach is hipErrorInvalidDevicePointer (17).
 *
 * Configuration (environment, read once at first use):
 *   FAKEHIP_DEVICES       "0000:05:00.0,0000:09:00.0,..." PCI addresses of the devices, in the
 *                         order the KFD topology enumerates them: HIP's order when no mask is
 *                         set. Any order may be given: list them out of PCI bus order to model a
 *                         node whose HIP order is not its bus order. Unset or empty: no device,
 *                         hipGetDeviceCount returns hipErrorNoDevice like the real runtime on a
 *                         machine without a GPU.
 *   ROCR_VISIBLE_DEVICES  selects and orders those devices by index as ROCr does; then
 *   HIP_VISIBLE_DEVICES   (else CUDA_VISIBLE_DEVICES) indexes ROCr's selection as CLR does, so
 *                         under a mask HIP numbers the visible devices from 0 (see init()).
 *   FAKEHIP_IPC_OPEN_FAIL "OWNER>OPENER,..." opening a handle exported on OWNER from OPENER fails
 *                         with 17.
 *   FAKEHIP_NO_PEER       "A>B,..." hipDeviceCanAccessPeer(A, B) says 0.
 *   FAKEHIP_HOST_GBPS     "PCI=GB/s,..." host link rate of a device (H2D and D2H).
 *   FAKEHIP_D2D_GBPS      "PCI=GB/s,..." rate of a copy through an opened handle, by opener.
 *   FAKEHIP_HANG          "hipFunctionName[@PCI]" that call never returns (on that current device).
 *   FAKEHIP_IPC_CORRUPT   "1": the opener sees one flipped byte (a broken mapping).
 *   FAKEHIP_STDOUT_NOISE  "1": every call prints an unterminated line to stdout.
 *   FAKEHIP_SHM_PREFIX    prefix of the shared memory object names (tests clean up by it).
 *   FAKEHIP_RUNTIME_VERSION  what hipRuntimeGetVersion reports (default 60400000).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int hipError_t;
enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorInvalidDevicePointer = 17,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidContext = 201,
    hipErrorMapFailed = 205,
    hipErrorPeerAccessUnsupported = 217,
    hipErrorInvalidHandle = 400,
    hipErrorPeerAccessAlreadyEnabled = 704,
    hipErrorPeerAccessNotEnabled = 705,
    hipErrorUnknown = 999,
};

#define MAX_DEVICES 64
#define MAX_REGIONS 256
#define PCI_LEN 16
#define IPC_MAGIC 0x46414b45u /* "FAKE" */

typedef struct {
    char reserved[64];
} hipIpcMemHandle_t;

/* The layout the fake keeps inside the 64 opaque bytes. */
typedef struct {
    uint32_t magic;
    int32_t owner_pid;
    int32_t owner_device; /* index into the owner's physical device table */
    uint32_t pad;
    uint64_t size;
    char name[40];
} fake_handle_t;

typedef struct {
    char *base;
    size_t size;
    int device;
    int is_ipc; /* 1: mapped from a handle, 0: our own allocation */
    int owner_device;
    char name[40];
} region_t;

typedef struct {
    int device;
    double t_s;
} fake_event_t;

static int initialised;
static char physical[MAX_DEVICES][PCI_LEN];
static int n_physical;
static int visible[MAX_DEVICES]; /* visible index -> physical index */
static int n_visible;
static double host_gbps[MAX_DEVICES];
static double d2d_gbps[MAX_DEVICES];
static double timeline_s[MAX_DEVICES];
static unsigned char peer_enabled[MAX_DEVICES][MAX_DEVICES];
static int current;
static region_t regions[MAX_REGIONS];
static unsigned long alloc_counter;

static int physical_index(const char *pci, size_t len) {
    for (int i = 0; i < n_physical; i++) {
        if (strlen(physical[i]) == len && strncasecmp(physical[i], pci, len) == 0) return i;
    }
    return -1;
}

static void parse_rates(const char *var, double *out) {
    const char *spec = getenv(var);
    if (spec == NULL) return;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq != NULL) {
            int dev = physical_index(p, (size_t)(eq - p));
            if (dev >= 0) out[dev] = strtod(eq + 1, NULL);
        }
        p += len;
        if (*p == ',') p++;
    }
}

static void init(void) {
    if (initialised) return;
    initialised = 1;
    const char *spec = getenv("FAKEHIP_DEVICES");
    if (spec != NULL) {
        const char *p = spec;
        while (*p && n_physical < MAX_DEVICES) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            if (len > 0 && len < PCI_LEN) {
                memcpy(physical[n_physical], p, len);
                physical[n_physical][len] = 0;
                n_physical++;
            }
            p += len;
            if (*p == ',') p++;
        }
    }
    /* Layer 1, ROCr: ROCR_VISIBLE_DEVICES selects and orders the KFD GPU nodes (the order of
     * FAKEHIP_DEVICES). Set but empty: no GPU. A token that is not an index (strtol base 0),
     * is out of range or repeats an earlier one ends the list; GPU-<uuid> tokens are not
     * modelled (the fake's devices have no UUID) and end it too. At most as many tokens as
     * GPUs are read. (ROCR-Runtime amd_filter_device.cpp, RvdFilter::BuildUsrDeviceList.) */
    int rocr[MAX_DEVICES];
    int n_rocr = 0;
    const char *rvd = getenv("ROCR_VISIBLE_DEVICES");
    if (rvd != NULL && *rvd) {
        const char *p = rvd;
        for (int tokens = 0; tokens < n_physical; tokens++) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            char tok[64];
            if (len >= sizeof tok) break;
            memcpy(tok, p, len);
            tok[len] = 0;
            char *t = tok;
            while (*t == ' ' || *t == '\t') t++;
            for (char *e = t + strlen(t); e > t && (e[-1] == ' ' || e[-1] == '\t'); e--) e[-1] = 0;
            if (*t == 'G' || *t == 'g') break;
            char *end;
            long idx = strtol(t, &end, 0); /* "" reads as 0, as in ROCr */
            if (*end != 0 || idx < 0 || idx >= n_physical) break;
            int seen = 0;
            for (int i = 0; i < n_rocr; i++) seen |= rocr[i] == (int)idx;
            if (seen) break;
            rocr[n_rocr++] = (int)idx;
            if (comma == NULL || comma[1] == 0) break; /* getline: no token after a last ',' */
            p = comma + 1;
        }
    } else if (rvd == NULL) {
        for (int i = 0; i < n_physical; i++) rocr[n_rocr++] = i;
    }
    /* Layer 2, HIP (CLR): HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES, indexes ROCr's list.
     * The first token that is not a canonical index below its size ends the list; a repeated
     * index is skipped. (clr rocclr/device/rocm/rocdevice.cpp, Device::init.) */
    const char *hip = getenv("HIP_VISIBLE_DEVICES");
    const char *vis = (hip != NULL && *hip) ? hip : getenv("CUDA_VISIBLE_DEVICES");
    if (vis != NULL && *vis) {
        const char *p = vis;
        while (*p && n_visible < MAX_DEVICES) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            char tok[32];
            if (len == 0 || len >= sizeof tok) break;
            memcpy(tok, p, len);
            tok[len] = 0;
            int idx = atoi(tok);
            char back[32];
            snprintf(back, sizeof back, "%d", idx);
            if (idx < 0 || idx >= n_rocr || strcmp(back, tok) != 0) break;
            int seen = 0;
            for (int i = 0; i < n_visible; i++) seen |= visible[i] == rocr[idx];
            if (!seen) visible[n_visible++] = rocr[idx];
            p += len;
            if (*p == ',') p++;
        }
    } else {
        for (int i = 0; i < n_rocr; i++) visible[n_visible++] = rocr[i];
    }
    parse_rates("FAKEHIP_HOST_GBPS", host_gbps);
    parse_rates("FAKEHIP_D2D_GBPS", d2d_gbps);
}

static const char *pci_of(int visible_index) { return physical[visible[visible_index]]; }

/* "A>B" listed in the comma-separated variable var? */
static int pair_listed(const char *var, const char *a, const char *b) {
    const char *spec = getenv(var);
    if (spec == NULL) return 0;
    char want[2 * PCI_LEN + 2];
    snprintf(want, sizeof want, "%s>%s", a, b);
    size_t want_len = strlen(want);
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == want_len && strncasecmp(p, want, len) == 0) return 1;
        p += len;
        if (*p == ',') p++;
    }
    return 0;
}

/* The injected hang: the named call never returns (the probe's stage timeout must catch it).
 * Every call passes here, so it is also where FAKEHIP_STDOUT_NOISE=1 prints an unterminated
 * debug line to stdout, as a chatty runtime build may. */
static void hang_point(const char *fn) {
    const char *noise = getenv("FAKEHIP_STDOUT_NOISE");
    if (noise != NULL && strcmp(noise, "1") == 0) {
        fputs(fn, stdout);
        fputs(": fakehip debug ", stdout);
        fflush(stdout);
    }
    const char *spec = getenv("FAKEHIP_HANG");
    if (spec == NULL || *spec == 0) return;
    size_t fn_len = strlen(fn);
    if (strncmp(spec, fn, fn_len) != 0) return;
    if (spec[fn_len] == '@') {
        if (n_visible == 0 || strcasecmp(spec + fn_len + 1, pci_of(current)) != 0) return;
    } else if (spec[fn_len] != 0) {
        return;
    }
    for (;;) pause();
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Advance the current device's timeline for a transfer of n bytes at rate (0: real time). */
static void advance(double rate_gbps, size_t n, double wall_s) {
    timeline_s[visible[current]] += rate_gbps > 0 ? (double)n / (rate_gbps * 1e9) : wall_s;
}

static region_t *find_region(const void *p, size_t n) {
    const char *c = p;
    for (int i = 0; i < MAX_REGIONS; i++) {
        region_t *r = &regions[i];
        if (r->base != NULL && c >= r->base && c + n <= r->base + r->size) return r;
    }
    return NULL;
}

static region_t *free_slot(void) {
    for (int i = 0; i < MAX_REGIONS; i++) {
        if (regions[i].base == NULL) return &regions[i];
    }
    return NULL;
}

static const char *shm_prefix(void) {
    const char *p = getenv("FAKEHIP_SHM_PREFIX");
    return p != NULL && *p ? p : "fakehip";
}

/* A real runtime frees device memory when the process exits; shared memory objects outlive it. */
__attribute__((destructor)) static void release_all(void) {
    for (int i = 0; i < MAX_REGIONS; i++) {
        if (regions[i].base != NULL && !regions[i].is_ipc) shm_unlink(regions[i].name);
    }
}

const char *hipGetErrorName(hipError_t e) {
    switch (e) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorInvalidDevicePointer: return "hipErrorInvalidDevicePointer";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorInvalidContext: return "hipErrorInvalidContext";
    case hipErrorMapFailed: return "hipErrorMapFailed";
    case hipErrorPeerAccessUnsupported: return "hipErrorPeerAccessUnsupported";
    case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
    case hipErrorPeerAccessAlreadyEnabled: return "hipErrorPeerAccessAlreadyEnabled";
    case hipErrorPeerAccessNotEnabled: return "hipErrorPeerAccessNotEnabled";
    default: return "hipErrorUnknown";
    }
}

hipError_t hipRuntimeGetVersion(int *version) {
    hang_point("hipRuntimeGetVersion");
    if (version == NULL) return hipErrorInvalidValue;
    const char *v = getenv("FAKEHIP_RUNTIME_VERSION");
    *version = v != NULL ? atoi(v) : 60400000;
    return hipSuccess;
}

hipError_t hipGetDeviceCount(int *count) {
    init();
    hang_point("hipGetDeviceCount");
    if (count == NULL) return hipErrorInvalidValue;
    *count = n_visible;
    return n_visible == 0 ? hipErrorNoDevice : hipSuccess;
}

hipError_t hipSetDevice(int device) {
    init();
    if (device < 0 || device >= n_visible) return hipErrorInvalidDevice;
    current = device;
    hang_point("hipSetDevice");
    return hipSuccess;
}

hipError_t hipDeviceGetPCIBusId(char *bus_id, int len, int device) {
    init();
    hang_point("hipDeviceGetPCIBusId");
    if (bus_id == NULL || len <= 0) return hipErrorInvalidValue;
    if (device < 0 || device >= n_visible) return hipErrorInvalidDevice;
    snprintf(bus_id, (size_t)len, "%s", pci_of(device));
    return hipSuccess;
}

hipError_t hipDeviceCanAccessPeer(int *can, int device, int peer) {
    init();
    hang_point("hipDeviceCanAccessPeer");
    if (can == NULL) return hipErrorInvalidValue;
    if (device < 0 || device >= n_visible || peer < 0 || peer >= n_visible)
        return hipErrorInvalidDevice;
    /* CLR hip_peer.cpp: "Peer cannot be self" -> 0 with hipSuccess. */
    *can = device != peer && !pair_listed("FAKEHIP_NO_PEER", pci_of(device), pci_of(peer));
    return hipSuccess;
}

hipError_t hipDeviceEnablePeerAccess(int peer, unsigned int flags) {
    init();
    hang_point("hipDeviceEnablePeerAccess");
    if (flags != 0) return hipErrorInvalidValue;
    int can = 0;
    hipError_t err = hipDeviceCanAccessPeer(&can, current, peer);
    if (err != hipSuccess) return err;
    if (!can) return hipErrorInvalidDevice; /* CLR returns 101 here, not 217 */
    if (peer_enabled[current][peer]) return hipErrorPeerAccessAlreadyEnabled;
    peer_enabled[current][peer] = 1;
    return hipSuccess;
}

hipError_t hipMalloc(void **ptr, size_t size) {
    init();
    hang_point("hipMalloc");
    if (ptr == NULL) return hipErrorInvalidValue;
    if (n_visible == 0) return hipErrorNoDevice;
    region_t *slot = free_slot();
    if (slot == NULL || size == 0) return hipErrorOutOfMemory;
    char name[40];
    snprintf(name, sizeof name, "/%s-%d-%lu", shm_prefix(), (int)getpid(), ++alloc_counter);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return hipErrorOutOfMemory;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        shm_unlink(name);
        return hipErrorOutOfMemory;
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        shm_unlink(name);
        return hipErrorOutOfMemory;
    }
    slot->base = base;
    slot->size = size;
    slot->device = current;
    slot->is_ipc = 0;
    slot->owner_device = visible[current];
    snprintf(slot->name, sizeof slot->name, "%s", name);
    *ptr = base;
    return hipSuccess;
}

hipError_t hipFree(void *ptr) {
    hang_point("hipFree");
    if (ptr == NULL) return hipSuccess;
    region_t *r = find_region(ptr, 0);
    if (r == NULL || r->is_ipc || r->base != ptr) return hipErrorInvalidValue;
    munmap(r->base, r->size);
    shm_unlink(r->name);
    memset(r, 0, sizeof *r);
    return hipSuccess;
}

hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags) {
    (void)flags;
    hang_point("hipHostMalloc");
    if (ptr == NULL) return hipErrorInvalidValue;
    if (posix_memalign(ptr, 4096, size) != 0) return hipErrorOutOfMemory;
    return hipSuccess;
}

hipError_t hipHostFree(void *ptr) {
    hang_point("hipHostFree");
    free(ptr);
    return hipSuccess;
}

enum { H2H = 0, H2D = 1, D2H = 2, D2D = 3, DEFAULT = 4 };

hipError_t hipMemcpy(void *dst, const void *src, size_t n, int kind) {
    init();
    hang_point("hipMemcpy");
    if (n == 0) return hipSuccess;
    if (dst == NULL || src == NULL || kind < H2H || kind > DEFAULT) return hipErrorInvalidValue;
    region_t *rd = find_region(dst, n);
    region_t *rs = find_region(src, n);
    if ((kind == H2D || kind == D2D) && rd == NULL) return hipErrorInvalidValue;
    if ((kind == D2H || kind == D2D) && rs == NULL) return hipErrorInvalidValue;
    double t0 = now_s();
    memcpy(dst, src, n);
    double wall = now_s() - t0;
    int dev = visible[current];
    if (kind == H2D || kind == D2H) {
        advance(host_gbps[dev], n, wall);
    } else if (kind == D2D && (rs->is_ipc || rd->is_ipc)) {
        advance(d2d_gbps[dev], n, wall);
    } else {
        advance(0, n, wall);
    }
    return hipSuccess;
}

hipError_t hipMemset(void *dst, int value, size_t n) {
    init();
    hang_point("hipMemset");
    if (find_region(dst, n) == NULL) return hipErrorInvalidValue;
    memset(dst, value, n);
    return hipSuccess;
}

hipError_t hipDeviceSynchronize(void) {
    hang_point("hipDeviceSynchronize");
    return hipSuccess;
}

hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *ptr) {
    init();
    hang_point("hipIpcGetMemHandle");
    if (handle == NULL) return hipErrorInvalidValue;
    region_t *r = find_region(ptr, 0);
    /* CLR: IpcCreate failing (not a hipMalloc base) -> hipErrorInvalidValue. */
    if (r == NULL || r->is_ipc || r->base != ptr) return hipErrorInvalidValue;
    fake_handle_t h;
    memset(&h, 0, sizeof h);
    h.magic = IPC_MAGIC;
    h.owner_pid = (int32_t)getpid();
    h.owner_device = r->owner_device;
    h.size = r->size;
    snprintf(h.name, sizeof h.name, "%s", r->name);
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &h, sizeof h);
    return hipSuccess;
}

hipError_t hipIpcOpenMemHandle(void **ptr, hipIpcMemHandle_t handle, unsigned int flags) {
    init();
    hang_point("hipIpcOpenMemHandle");
    if (ptr == NULL || flags != 1 /* hipIpcMemLazyEnablePeerAccess */) return hipErrorInvalidValue;
    fake_handle_t h;
    memcpy(&h, handle.reserved, sizeof h);
    if (h.size == 0) return hipErrorInvalidValue;
    if (h.owner_pid == (int32_t)getpid()) return hipErrorInvalidContext;
    if (h.magic != IPC_MAGIC || n_visible == 0) return hipErrorInvalidDevicePointer;
    /* The owner's device is named by its physical index: the handle crosses processes. */
    if (h.owner_device >= 0 && h.owner_device < n_physical &&
        pair_listed("FAKEHIP_IPC_OPEN_FAIL", physical[h.owner_device], pci_of(current)))
        return hipErrorInvalidDevicePointer;
    region_t *slot = free_slot();
    if (slot == NULL) return hipErrorOutOfMemory;
    h.name[sizeof h.name - 1] = 0;
    int fd = shm_open(h.name, O_RDWR, 0);
    if (fd < 0) return hipErrorInvalidDevicePointer; /* the attach failed: the owner is gone */
    void *base = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) return hipErrorMapFailed;
    const char *corrupt = getenv("FAKEHIP_IPC_CORRUPT");
    if (corrupt != NULL && strcmp(corrupt, "1") == 0) ((unsigned char *)base)[h.size / 2] ^= 0xff;
    slot->base = base;
    slot->size = h.size;
    slot->device = current;
    slot->is_ipc = 1;
    slot->owner_device = h.owner_device;
    snprintf(slot->name, sizeof slot->name, "%s", h.name);
    *ptr = base;
    return hipSuccess;
}

hipError_t hipIpcCloseMemHandle(void *ptr) {
    hang_point("hipIpcCloseMemHandle");
    region_t *r = find_region(ptr, 0);
    if (r == NULL || !r->is_ipc || r->base != ptr) return hipErrorInvalidValue;
    munmap(r->base, r->size);
    memset(r, 0, sizeof *r);
    return hipSuccess;
}

typedef fake_event_t *hipEvent_t;

hipError_t hipEventCreate(hipEvent_t *event) {
    init();
    hang_point("hipEventCreate");
    if (event == NULL) return hipErrorInvalidValue;
    fake_event_t *e = calloc(1, sizeof *e);
    if (e == NULL) return hipErrorOutOfMemory;
    e->device = n_visible ? visible[current] : 0;
    *event = e;
    return hipSuccess;
}

hipError_t hipEventRecord(hipEvent_t event, void *stream) {
    (void)stream;
    hang_point("hipEventRecord");
    if (event == NULL) return hipErrorInvalidHandle;
    event->t_s = timeline_s[event->device];
    return hipSuccess;
}

hipError_t hipEventSynchronize(hipEvent_t event) {
    hang_point("hipEventSynchronize");
    return event == NULL ? hipErrorInvalidHandle : hipSuccess;
}

hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop) {
    hang_point("hipEventElapsedTime");
    if (ms == NULL) return hipErrorInvalidValue;
    if (start == NULL || stop == NULL) return hipErrorInvalidHandle;
    *ms = (float)((stop->t_s - start->t_s) * 1000.0);
    return hipSuccess;
}

hipError_t hipEventDestroy(hipEvent_t event) {
    free(event);
    return hipSuccess;
}
