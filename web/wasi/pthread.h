// web/wasi/pthread.h: WASI (wasi-libc without threads) has no pthread.h. The planner includes
// core/nvme.h through zero.h but never starts its I/O thread (the time model simulates NVMe), so
// these single-threaded stand-ins only have to compile: creating a thread fails.
#ifndef WEB_WASI_PTHREAD_H
#define WEB_WASI_PTHREAD_H
#include <errno.h>
typedef int pthread_t, pthread_mutex_t, pthread_cond_t, pthread_attr_t, pthread_mutexattr_t, pthread_condattr_t;
static inline int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*f)(void *), void *arg) {
    (void)t, (void)a, (void)f, (void)arg;
    return ENOSYS;
}
static inline int pthread_join(pthread_t t, void **r) { (void)t, (void)r; return ENOSYS; }
static inline int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a) { (void)a; *m = 0; return 0; }
static inline int pthread_mutex_destroy(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_lock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_unlock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a) { (void)a; *c = 0; return 0; }
static inline int pthread_cond_destroy(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_signal(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_broadcast(pthread_cond_t *c) { (void)c; return 0; }
static inline int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) { (void)c, (void)m; return ENOSYS; }
#endif
