/* keep-bodies URL REQUESTS CONCURRENCY
 *
 * A raw libcurl client that keeps every response body, as a client library must, instead of only
 * counting its bytes as compare.sh's C peers do. Same contract as brick-bench (../shared/bench):
 * exactly REQUESTS GETs with CONCURRENCY in flight, one result line on stdout. Same loop as the
 * peers' faster one (curl_multi_perform + curl_multi_poll, one easy handle per slot, reused).
 *
 * Each body is copied into a buffer sized from Content-Length. KEEP_BODIES=reuse keeps one buffer
 * per easy handle for the whole run (the cheapest a C program can keep a body it never hands on);
 * KEEP_BODIES=malloc (the default) allocates a buffer per response and frees it when the response
 * is done, as a program that hands each body to its caller does.
 *
 * Built and run by compare-modes.py: cc -O2 -o keep-bodies keep-bodies.c -lcurl
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct slot {
  CURL *easy;
  char *bytes;
  size_t length, capacity;
};

static int reuse;
static long total, started, finished, ok, failed;

static size_t keep(char *data, size_t size, size_t count, void *context) {
  struct slot *slot = context;
  size_t n = size * count;
  if (slot->length + n > slot->capacity) {
    curl_off_t expected = -1;
    if (slot->length == 0) curl_easy_getinfo(slot->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &expected);
    size_t capacity = expected > 0 ? (size_t)expected : 16384;
    while (capacity < slot->length + n) capacity *= 2;
    char *grown = realloc(slot->bytes, capacity);
    if (!grown) return 0; /* makes libcurl fail the transfer */
    slot->bytes = grown;
    slot->capacity = capacity;
  }
  memcpy(slot->bytes + slot->length, data, n);
  slot->length += n;
  return n;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 4 || atol(argv[2]) <= 0 || atol(argv[3]) <= 0) {
    fprintf(stderr, "usage: keep-bodies URL REQUESTS CONCURRENCY\n");
    return 2;
  }
  const char *mode = getenv("KEEP_BODIES");
  reuse = mode && strcmp(mode, "reuse") == 0;
  total = atol(argv[2]);
  long concurrency = atol(argv[3]) < total ? atol(argv[3]) : total;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURLM *multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, concurrency);
  curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, concurrency);
  struct slot *slots = calloc((size_t)concurrency, sizeof *slots);
  for (long i = 0; i < concurrency; i++) {
    CURL *easy = curl_easy_init();
    slots[i].easy = easy;
    curl_easy_setopt(easy, CURLOPT_URL, argv[1]);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, keep);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &slots[i]);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, &slots[i]);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    if (getenv("BENCH_CA_FILE")) curl_easy_setopt(easy, CURLOPT_CAINFO, getenv("BENCH_CA_FILE"));
  }
  double start = now();
  for (long i = 0; i < concurrency; i++, started++) curl_multi_add_handle(multi, slots[i].easy);
  while (finished < total) {
    int running = 0;
    curl_multi_perform(multi, &running);
    CURLMsg *message;
    int queued;
    while ((message = curl_multi_info_read(multi, &queued))) {
      if (message->msg != CURLMSG_DONE) continue;
      struct slot *slot = NULL;
      long status = 0;
      curl_easy_getinfo(message->easy_handle, CURLINFO_PRIVATE, (char **)&slot);
      curl_easy_getinfo(message->easy_handle, CURLINFO_RESPONSE_CODE, &status);
      if (message->data.result == CURLE_OK && status == 200) ok++; else failed++;
      finished++;
      if (!reuse) {
        free(slot->bytes);
        slot->bytes = NULL;
        slot->capacity = 0;
      }
      slot->length = 0;
      curl_multi_remove_handle(multi, slot->easy);
      if (started < total) {
        curl_multi_add_handle(multi, slot->easy);
        started++;
      }
    }
    if (finished < total) curl_multi_poll(multi, NULL, 0, 1000, NULL);
  }
  double seconds = now() - start;
  printf("requests=%ld ok=%ld failed=%ld seconds=%.3f rps=%.1f\n", total, ok, failed, seconds,
         (double)total / seconds);
  return failed ? 1 : 0;
}
