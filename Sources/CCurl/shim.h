#ifndef CCURL_SHIM_H
#define CCURL_SHIM_H

#include <curl/curl.h>
#include <signal.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Swift cannot call libcurl's variadic functions (curl_easy_setopt, curl_easy_getinfo,
 * curl_multi_setopt). Each wrapper below fixes one argument category, so the width libcurl
 * reads from the va_list always matches what we pass. The Swift side checks the option's
 * category (its number range) before calling. */

typedef size_t (*ccurl_data_callback)(char *buffer, size_t size, size_t nitems, void *userdata);
typedef int (*ccurl_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                       curl_off_t ultotal, curl_off_t ulnow);
typedef int (*ccurl_seek_callback)(void *userdata, curl_off_t offset, int origin);
typedef int (*ccurl_prereq_callback)(void *userdata, char *primary_ip, char *local_ip, int primary_port,
                                     int local_port);
typedef curl_socket_t (*ccurl_opensocket_callback)(void *userdata, curlsocktype purpose,
                                                   struct curl_sockaddr *address);
typedef int (*ccurl_closesocket_callback)(void *userdata, curl_socket_t socket);

static inline CURLcode ccurl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode ccurl_easy_setopt_off(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode ccurl_easy_setopt_ptr(CURL *handle, CURLoption option, const void *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode ccurl_easy_setopt_data_callback(CURL *handle, CURLoption option,
                                                       ccurl_data_callback callback) {
    return curl_easy_setopt(handle, option, callback);
}
static inline CURLcode ccurl_easy_setopt_xferinfo_callback(CURL *handle,
                                                           ccurl_xferinfo_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback);
}
static inline CURLcode ccurl_easy_setopt_seek_callback(CURL *handle, ccurl_seek_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_SEEKFUNCTION, callback);
}

/* Called before each request is sent, on a new or a reused connection (libcurl 7.80+). Returns
 * CURLE_UNKNOWN_OPTION on an older libcurl: the caller then does without the check. */
static inline CURLcode ccurl_easy_setopt_prereq_callback(CURL *handle, ccurl_prereq_callback callback) {
#if LIBCURL_VERSION_NUM >= 0x075000
    return curl_easy_setopt(handle, CURLOPT_PREREQFUNCTION, callback);
#else
    (void)handle; (void)callback;
    return CURLE_UNKNOWN_OPTION;
#endif
}
static inline CURLcode ccurl_easy_setopt_prereq_data(CURL *handle, void *data) {
#if LIBCURL_VERSION_NUM >= 0x075000
    return curl_easy_setopt(handle, CURLOPT_PREREQDATA, data);
#else
    (void)handle; (void)data;
    return CURLE_UNKNOWN_OPTION;
#endif
}
static inline CURLcode ccurl_easy_setopt_opensocket_callback(CURL *handle, ccurl_opensocket_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_OPENSOCKETFUNCTION, callback);
}
static inline CURLcode ccurl_easy_setopt_closesocket_callback(CURL *handle, ccurl_closesocket_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_CLOSESOCKETFUNCTION, callback);
}

static inline CURLcode ccurl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode ccurl_easy_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode ccurl_easy_getinfo_string(CURL *handle, CURLINFO info, char **value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode ccurl_easy_getinfo_ptr(CURL *handle, CURLINFO info, void **value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLMcode ccurl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}

static inline CURLSHcode ccurl_share_setopt_long(CURLSH *share, CURLSHoption option, long value) {
    return curl_share_setopt(share, option, value);
}

/* calloc for libcurl that goes through malloc, so small blocks come from glibc's per-thread cache:
 * glibc 2.36 (Debian 12's) serves every calloc from the arena, under the arena's lock once the
 * process has a second thread. libcurl 7.88 makes 11 callocs per HTTP/1.1 request. The blocks are
 * ordinary malloc blocks, so memory from this and from libc's calloc are freed alike. */
static inline void *ccurl_calloc(size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) return NULL;
    void *block = malloc(total);
    /* The barrier keeps the compiler from fusing malloc + memset back into calloc. */
    __asm__ volatile("" : : "r"(block) : "memory");
    if (block != NULL) memset(block, 0, total);
    return block;
}
/* curl_global_init with ccurl_calloc. When the program initialised libcurl first, this only counts
 * one more user and libcurl keeps the program's allocator. */
static inline CURLcode ccurl_global_init(void) {
    return curl_global_init_mem(CURL_GLOBAL_DEFAULT, malloc, free, realloc, strdup, ccurl_calloc);
}

/* Constants that are macros Swift does not import, or whose type needs widening. */
static inline int ccurl_readfunc_abort(void) { return CURL_READFUNC_ABORT; }
static inline int ccurl_seekfunc_ok(void) { return CURL_SEEKFUNC_OK; }
static inline int ccurl_seekfunc_cantseek(void) { return CURL_SEEKFUNC_CANTSEEK; }
static inline size_t ccurl_writefunc_pause(void) { return CURL_WRITEFUNC_PAUSE; }
static inline int ccurl_prereqfunc_ok(void) { return 0; /* CURL_PREREQFUNC_OK */ }
static inline int ccurl_prereqfunc_abort(void) { return 1; /* CURL_PREREQFUNC_ABORT */ }
static inline int ccurl_pause_continue(void) { return CURLPAUSE_CONT; }
static inline int ccurl_pause_receive_only(void) { return CURLPAUSE_RECV; }
static inline int ccurl_readfunc_pause(void) { return CURL_READFUNC_PAUSE; }
static inline curl_socket_t ccurl_socket_bad(void) { return CURL_SOCKET_BAD; }
static inline int ccurl_sock_cloexec(void) { return SOCK_CLOEXEC; }
static inline long ccurl_error_size(void) { return CURL_ERROR_SIZE; }
static inline long ccurl_version_num(void) { return LIBCURL_VERSION_NUM; }
static inline long ccurl_version_features(void) { return (long)curl_version_info(CURLVERSION_NOW)->features; }
static inline const char *ccurl_version_string(void) { return curl_version_info(CURLVERSION_NOW)->version; }

/* OpenSSL's atexit handler can race with a curl driver thread still cleaning up at process exit
 * (swift-corelibs-foundation #5469). Ask OpenSSL not to register it, as FoundationNetworking does.
 * Looked up at run time so a libcurl built on another TLS library still works. */
static inline void ccurl_openssl_no_atexit(void) {
    typedef int (*init_fn)(unsigned long long, const void *);
    init_fn init = (init_fn)dlsym(RTLD_DEFAULT, "OPENSSL_init_crypto");
    if (init != NULL) { init(0x00080000ULL /* OPENSSL_INIT_NO_ATEXIT */, NULL); }
}

/* Ignore SIGPIPE process-wide: with CURLOPT_NOSIGNAL libcurl no longer does it per call. */
static inline void ccurl_ignore_sigpipe(void) { signal(SIGPIPE, SIG_IGN); }

/* One iteration of a spin-wait: tells the CPU (and a hypervisor) that this thread is waiting. */
static inline void ccurl_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
