/* What the disk itself does for a given set of pages: the floor that
 * bench_engram_staging.py sets Engram-on-disk's cold staging against.
 *
 *   disk_floor rand THREADS LIST FILE...   4 KiB preads of the pages in LIST
 *                                          (int64 pairs: file index, byte
 *                                          offset), THREADS at a time: the
 *                                          queue depth
 *   disk_floor runs THREADS LIST FILE...   the same pages, adjacent ones of
 *                                          a file merged into one pread per
 *                                          run (at most 1 MiB): what an ideal
 *                                          reader of exactly these pages does
 *   disk_floor seq  CHUNK_KIB FILE...      each file read start to end
 *
 * Buffered reads with read-ahead off (POSIX_FADV_RANDOM) for rand and runs, so
 * only the listed pages are read, as in the page cache path the stager uses; the caller
 * empties the page cache (and checks it with mincore) before each run.
 * Prints one JSON line: reads, bytes, seconds (threads started and waiting
 * before the clock starts).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fds[64];
static int64_t *list;  /* rand: (file, offset) pairs; runs: (file, offset, length) triples */
static long count;
static int merged;
#define RUN_MAX (1L << 20)
static atomic_long next_read;
static pthread_barrier_t start;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
    (void)arg;
    char *buf = aligned_alloc(4096, RUN_MAX);
    pthread_barrier_wait(&start);
    for (;;) {
        long i = atomic_fetch_add(&next_read, 1);
        if (i >= count) break;
        int64_t *e = merged ? &list[3 * i] : &list[2 * i];
        if (pread(fds[e[0]], buf, merged ? e[2] : 4096, e[1]) < 0) {
            perror("pread");
            exit(1);
        }
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: disk_floor rand|runs THREADS LIST FILE... | seq CHUNK_KIB FILE...\n");
        return 2;
    }
    int seq = strcmp(argv[1], "seq") == 0;
    int first = seq ? 3 : 4;
    int nfiles = argc - first;
    for (int f = 0; f < nfiles && f < 64; f++) {
        fds[f] = open(argv[first + f], O_RDONLY);
        if (fds[f] < 0) { perror(argv[first + f]); return 1; }
        posix_fadvise(fds[f], 0, 0, seq ? POSIX_FADV_SEQUENTIAL : POSIX_FADV_RANDOM);
    }
    if (seq) {
        long chunk = atol(argv[2]) * 1024;
        char *buf = aligned_alloc(4096, chunk);
        long total = 0, reads = 0;
        double t0 = now();
        for (int f = 0; f < nfiles; f++) {
            off_t off = 0;
            ssize_t n;
            while ((n = pread(fds[f], buf, chunk, off)) > 0) { off += n; total += n; reads++; }
        }
        double t = now() - t0;
        printf("{\"mode\": \"seq\", \"chunk_kib\": %ld, \"reads\": %ld, \"bytes\": %ld, \"seconds\": %.6f}\n",
               chunk / 1024, reads, total, t);
        return 0;
    }
    int threads = atoi(argv[2]);
    FILE *in = fopen(argv[3], "rb");
    if (!in) { perror(argv[3]); return 1; }
    fseek(in, 0, SEEK_END);
    count = ftell(in) / 16;
    fseek(in, 0, SEEK_SET);
    list = malloc(count * 16);
    if (fread(list, 16, count, in) != (size_t)count) { perror("fread"); return 1; }
    fclose(in);
    long pages = count;
    merged = strcmp(argv[1], "runs") == 0;
    if (merged) {
        /* The list is sorted by file, then offset (the stager's own order). */
        int64_t *runs = malloc(pages * 24);
        long n = 0;
        for (long i = 0; i < pages; i++) {
            int64_t f = list[2 * i], off = list[2 * i + 1];
            int64_t *last = n ? &runs[3 * (n - 1)] : NULL;
            if (last && last[0] == f && last[1] + last[2] == off && last[2] < RUN_MAX) {
                last[2] += 4096;
            } else {
                runs[3 * n] = f; runs[3 * n + 1] = off; runs[3 * n + 2] = 4096; n++;
            }
        }
        free(list);
        list = runs;
        count = n;
    }
    if (threads < 1 || threads > 1024) { fprintf(stderr, "THREADS: 1 to 1024\n"); return 2; }
    pthread_t tid[1024];
    pthread_barrier_init(&start, NULL, threads + 1);
    for (int i = 0; i < threads; i++) pthread_create(&tid[i], NULL, reader, NULL);
    pthread_barrier_wait(&start);
    double t0 = now();
    for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
    double t = now() - t0;
    printf("{\"mode\": \"%s\", \"threads\": %d, \"reads\": %ld, \"bytes\": %ld, \"seconds\": %.6f}\n",
           merged ? "runs" : "rand", threads, count, pages * 4096, t);
    return 0;
}
