/* What the disk itself does for a given set of pages: the floor that
 * bench_engram_staging.py sets Engram-on-disk's cold staging against.
 *
 *   disk_floor rand THREADS LIST FILE...   4 KiB preads of the pages in LIST
 *                                          (int64 pairs: file index, byte
 *                                          offset), THREADS at a time: the
 *                                          queue depth
 *   disk_floor seq  CHUNK_KIB FILE...      each file read start to end
 *
 * Buffered reads with read-ahead off (POSIX_FADV_RANDOM) for rand, so each
 * read is one page, as in the page cache path the stager uses; the caller
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
static int64_t *list;
static long count;
static atomic_long next_read;
static pthread_barrier_t start;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
    (void)arg;
    char *buf = aligned_alloc(4096, 4096);
    pthread_barrier_wait(&start);
    for (;;) {
        long i = atomic_fetch_add(&next_read, 1);
        if (i >= count) break;
        if (pread(fds[list[2 * i]], buf, 4096, list[2 * i + 1]) < 0) {
            perror("pread");
            exit(1);
        }
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: disk_floor rand THREADS LIST FILE... | seq CHUNK_KIB FILE...\n");
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
    pthread_t tid[1024];
    pthread_barrier_init(&start, NULL, threads + 1);
    for (int i = 0; i < threads; i++) pthread_create(&tid[i], NULL, reader, NULL);
    pthread_barrier_wait(&start);
    double t0 = now();
    for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
    double t = now() - t0;
    printf("{\"mode\": \"rand\", \"threads\": %d, \"reads\": %ld, \"bytes\": %ld, \"seconds\": %.6f}\n",
           threads, count, count * 4096, t);
    return 0;
}
