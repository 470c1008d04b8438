/*
 * clockshim: an LD_PRELOAD library that moves only a process's wall clock.
 *
 * The offset (signed nanoseconds, one native int64 at the start of the file
 * named by CLOCKSHIM_OFFSET_FILE) is mapped shared once and read with every
 * call, so a test that rewrites it in place moves the clock at once, as an
 * NTP step moves a host's clock: CLOCK_REALTIME, CLOCK_REALTIME_COARSE and
 * CLOCK_TAI (clock_gettime), gettimeofday and time are offset; the monotonic
 * and boot clocks, sleeps and timers are the kernel's, untouched.
 *
 * Without the variable, or with a file that cannot be mapped, every call is
 * passed through (offset 0). Thread safe: the setup runs once (pthread_once)
 * and the offset is one aligned 8-byte atomic load.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S 1000000000LL

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*gettimeofday_fn)(struct timeval *, void *);
typedef time_t (*time_fn)(time_t *);

static clock_gettime_fn real_clock_gettime;
static gettimeofday_fn real_gettimeofday;
static time_fn real_time;
static const volatile int64_t *offset_ns;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void)
{
    real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    real_gettimeofday = (gettimeofday_fn)dlsym(RTLD_NEXT, "gettimeofday");
    real_time = (time_fn)dlsym(RTLD_NEXT, "time");
    const char *path = getenv("CLOCKSHIM_OFFSET_FILE");
    if (path == NULL || *path == '\0')
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    void *map = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map != MAP_FAILED)
        offset_ns = (const volatile int64_t *)map;
}

static inline void init(void)
{
    pthread_once(&once, setup);
}

static inline int64_t offset(void)
{
    const volatile int64_t *p = offset_ns;
    return p == NULL ? 0 : __atomic_load_n(p, __ATOMIC_RELAXED);
}

static int wall(clockid_t id)
{
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE
#ifdef CLOCK_TAI
        || id == CLOCK_TAI
#endif
        ;
}

static void shift(struct timespec *ts, int64_t by)
{
    int64_t ns = (int64_t)ts->tv_nsec + by % NS_PER_S;
    int64_t s = (int64_t)ts->tv_sec + by / NS_PER_S;
    if (ns < 0) {
        ns += NS_PER_S;
        s -= 1;
    } else if (ns >= NS_PER_S) {
        ns -= NS_PER_S;
        s += 1;
    }
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)ns;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    init();
    int rc = real_clock_gettime(id, ts);
    if (rc == 0 && wall(id)) {
        int64_t by = offset();
        if (by != 0)
            shift(ts, by);
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz)
{
    init();
    int rc = real_gettimeofday(tv, tz);
    int64_t by = offset();
    struct timeval *volatile given = tv; /* NULL is allowed (only tz wanted) */
    if (rc == 0 && given != NULL && by != 0) {
        struct timespec ts = {tv->tv_sec, (long)tv->tv_usec * 1000};
        shift(&ts, by);
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out)
{
    init();
    struct timespec ts;
    if (real_clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return real_time(out);
    shift(&ts, offset());
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
