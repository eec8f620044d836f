/* SPDX-License-Identifier: Apache-2.0 */
/* A stand-in for libnvidia-ml.so.1 (no GPU on the test machine), built by the tests into a
 * fake driver root, so that the agent's real NVML path runs end to end: the library found
 * under --driver-root, loaded, and driven through nvidia-ml-py's own calls.
 *
 * It implements only what the agent's probe calls, with NVML's C signatures, and reads the
 * tray it pretends to be from the file named by NVML_STANDIN_CONF, at every nvmlInit:
 *
 *     driver 580.82.07
 *     gpu <uuid> <fabric state 0-3> <fabric status> <clique id> <cluster uuid 8-4-4-4-12>
 *
 * A missing file makes nvmlInit fail with NVML_ERROR_DRIVER_NOT_LOADED (9), as NVML does on
 * a host whose kernel module is not loaded.
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
};

static char driver[80];
static struct gpu gpus[MAX_GPUS];
static unsigned int count;

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

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    const char *path = getenv("NVML_STANDIN_CONF");
    FILE *fh = path ? fopen(path, "r") : NULL;
    if (!fh) return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
    char line[512], cluster[64];
    count = 0;
    driver[0] = 0;
    while (fgets(line, sizeof line, fh)) {
        struct gpu *g = &gpus[count];
        if (sscanf(line, "driver %79s", driver) == 1) continue;
        if (count < MAX_GPUS &&
            sscanf(line, "gpu %95s %u %u %u %63s", g->uuid, &g->state, &g->status, &g->clique,
                   cluster) == 5 &&
            parse_uuid(cluster, g->cluster) == 0)
            count++;
    }
    fclose(fh);
    return 0;
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { return 0; }

const char *nvmlErrorString(int result) {
    switch (result) {
    case 0: return "Success";
    case 9: return "Driver Not Loaded";
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
