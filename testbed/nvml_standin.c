/* SPDX-License-Identifier: Apache-2.0 */
/* A stand-in for libnvidia-ml.so.1 (no GPU on the test machine), built by the tests into a
 * fake driver root, so that the agent's real NVML path runs end to end: the library found
 * under --driver-root, loaded, and driven through nvidia-ml-py's own calls.
 *
 * It implements only what the agent's probe and GPU-health sampler call, with NVML's C
 * signatures, and reads the tray it pretends to be from the file named by NVML_STANDIN_CONF,
 * at every nvmlInit and again at every health reading (so a test can change it under a
 * running agent):
 *
 *     driver 580.82.07
 *     vbios 97.00.B9.00.12
 *     gpu <uuid> <fabric state 0-3> <fabric status> <clique id> <cluster uuid 8-4-4-4-12>
 *     health <gpu index> <temp C> <power mW> <ECC corrected> <ECC uncorrected>
 *            <NVLink CRC flit> <CRC data> <replay> <recovery>
 *     xid <gpu index> <XID>
 *
 * Each xid line is one XID critical-error event, delivered once, in order, through an event
 * set registered for it. A missing file makes nvmlInit fail with NVML_ERROR_DRIVER_NOT_LOADED
 * (9), as NVML does on a host whose kernel module is not loaded.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 8

typedef struct {
    unsigned char clusterUuid[16];
    unsigned int status;
    unsigned int cliqueId;
    unsigned int state;
} nvmlGpuFabricInfo_t;

struct gpu {
    char uuid[96];
    unsigned int state, status, clique;
    unsigned char cluster[16];
    unsigned int temp, power;
    unsigned long long ecc[2], nvlink[4];
};

/* nvml.h's nvmlFieldValue_t and nvmlEventData_t */
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned int valueType, nvmlReturn;
    union { double d; unsigned int ui; unsigned long ul; unsigned long long ull; } value;
} nvmlFieldValue_t;

typedef struct {
    void *device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

#define MAX_XIDS 64
static char driver[80], vbios[32];
static struct gpu gpus[MAX_GPUS];
static unsigned int count;
static unsigned int xid_gpu[MAX_XIDS], xid_code[MAX_XIDS], xids, delivered;
static int event_set, registered;

static int parse_uuid(const char *text, unsigned char out[16]) {
    int n = 0;
    for (; *text && n < 32; text++) {
        if (*text == '-') continue;
        if (!isxdigit((unsigned char)*text)) return -1;
        int v = isdigit((unsigned char)*text) ? *text - '0' : (tolower(*text) - 'a' + 10);
        if (n % 2 == 0) out[n / 2] = (unsigned char)(v << 4); else out[n / 2] |= (unsigned char)v;
        n++;
    }
    return n == 32 ? 0 : -1;
}

static void health_line(const char *line) {
    unsigned int i, temp, power;
    unsigned long long e[2], n[4];
    if (sscanf(line, "health %u %u %u %llu %llu %llu %llu %llu %llu", &i, &temp, &power, &e[0],
               &e[1], &n[0], &n[1], &n[2], &n[3]) == 9 && i < MAX_GPUS) {
        gpus[i].temp = temp;
        gpus[i].power = power;
        memcpy(gpus[i].ecc, e, sizeof e);
        memcpy(gpus[i].nvlink, n, sizeof n);
    }
}

static int load(void) {
    const char *path = getenv("NVML_STANDIN_CONF");
    FILE *fh = path ? fopen(path, "r") : NULL;
    if (!fh) return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
    char line[512], cluster[64];
    unsigned int i, code;
    count = 0;
    xids = 0;
    driver[0] = vbios[0] = 0;
    while (fgets(line, sizeof line, fh)) {
        struct gpu *g = &gpus[count];
        if (sscanf(line, "driver %79s", driver) == 1) continue;
        if (sscanf(line, "vbios %31s", vbios) == 1) continue;
        if (sscanf(line, "xid %u %u", &i, &code) == 2 && xids < MAX_XIDS) {
            xid_gpu[xids] = i;
            xid_code[xids++] = code;
            continue;
        }
        if (strncmp(line, "health ", 7) == 0) {
            health_line(line);
            continue;
        }
        if (count < MAX_GPUS &&
            sscanf(line, "gpu %95s %u %u %u %63s", g->uuid, &g->state, &g->status, &g->clique,
                   cluster) == 5 &&
            parse_uuid(cluster, g->cluster) == 0)
            count++;
    }
    fclose(fh);
    return 0;
}

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return load();
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { return 0; }

const char *nvmlErrorString(int result) {
    switch (result) {
    case 0: return "Success";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 12: return "Not Found";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "%s", driver);
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *n) {
    *n = count;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if (index >= count) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *device = &gpus[index];
    return 0;
}

int nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length) {
    snprintf(uuid, length, "%s", ((struct gpu *)device)->uuid);
    return 0;
}

int nvmlDeviceGetName(void *device, char *name, unsigned int length) {
    (void)device;
    snprintf(name, length, "NVIDIA GB200");
    return 0;
}

int nvmlDeviceGetGpuFabricInfo(void *device, nvmlGpuFabricInfo_t *info) {
    struct gpu *g = device;
    memcpy(info->clusterUuid, g->cluster, 16);
    info->status = g->status;
    info->cliqueId = g->clique;
    info->state = g->state;
    return 0;
}

int nvmlDeviceGetVbiosVersion(void *device, char *version, unsigned int length) {
    (void)device;
    if (!vbios[0]) return 3; /* NVML_ERROR_NOT_SUPPORTED */
    snprintf(version, length, "%s", vbios);
    return 0;
}

int nvmlDeviceGetIndex(void *device, unsigned int *index) {
    *index = (unsigned int)((struct gpu *)device - gpus);
    return 0;
}

int nvmlDeviceGetTemperature(void *device, int sensor, unsigned int *temp) {
    (void)sensor;
    load();
    *temp = ((struct gpu *)device)->temp;
    return 0;
}

int nvmlDeviceGetPowerUsage(void *device, unsigned int *power) {
    load();
    *power = ((struct gpu *)device)->power;
    return 0;
}

int nvmlDeviceGetTotalEccErrors(void *device, int type, int counter, unsigned long long *n) {
    (void)counter;
    if (type < 0 || type > 1) return 2;
    *n = ((struct gpu *)device)->ecc[type];
    return 0;
}

int nvmlDeviceGetFieldValues(void *device, int n, nvmlFieldValue_t *values) {
    struct gpu *g = device;
    for (int i = 0; i < n; i++) {
        unsigned int id = values[i].fieldId;
        /* NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL */
        int which = id == 38 ? 0 : id == 45 ? 1 : id == 52 ? 2 : id == 59 ? 3 : -1;
        values[i].valueType = 3; /* NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */
        values[i].nvmlReturn = which < 0 ? 3 : 0;
        values[i].value.ull = which < 0 ? 0 : g->nvlink[which];
    }
    return 0;
}

int nvmlEventSetCreate(void **set) {
    *set = &event_set;
    return 0;
}

int nvmlDeviceRegisterEvents(void *device, unsigned long long types, void *set) {
    (void)device;
    (void)set;
    if (types & 0x8) registered = 1; /* nvmlEventTypeXidCriticalError */
    return 0;
}

int nvmlEventSetWait_v2(void *set, nvmlEventData_t *data, unsigned int timeout) {
    (void)set;
    (void)timeout;
    load();
    if (!registered || delivered >= xids) return 10; /* NVML_ERROR_TIMEOUT */
    memset(data, 0, sizeof *data);
    data->device = &gpus[xid_gpu[delivered]];
    data->eventType = 0x8;
    data->eventData = xid_code[delivered++];
    return 0;
}

int nvmlEventSetFree(void *set) {
    (void)set;
    registered = 0;
    return 0;
}
