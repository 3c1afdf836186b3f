/* statefile.h — disk checkpoints (`redlite serve --state-dir DIR`): a context's state saved with
 * the tokens it holds, so a restarted server (or a conversation evicted from memory) resumes
 * without re-reading a long prefix.
 *
 * A checkpoint file holds: a header (magic "RLSTATE\0", format version, model fingerprint =
 * GGUF file sizes + a hash of every part's header, metadata and tensor table + a full content
 * hash of every part's tensor data, the engine's state format such as "cpu/f32", the build,
 * token count, state size, a checksum of tokens + state),
 * then the token ids, then the engine state blob (engine_state_export). Files are written to a
 * temporary name, fsync'd and renamed, so a crash never leaves a half-written file under a
 * checkpoint name; the checksum catches anything else. Files of another model, format, build or
 * version are ignored (left alone: another server may use them); a file that claims to be ours
 * but fails to read or verify is deleted.
 *
 * The directory is size-capped: after a save, least recently used files (mtime; a restore
 * touches its file) are deleted until the total fits — every checkpoint in the directory and
 * every temporary counts, whatever model wrote it; the file just written is always kept. A
 * save also deletes this model's files whose tokens are a prefix of the new one (the new file
 * supersedes them).
 *
 * Several servers may share one directory (replicas, or a restart overlapping the old process):
 * DIR/.lock is flock'd exclusively while a save writes, renames and trims, and while the
 * directory is scanned at open (so every .tmp- file found then is a torn write and is deleted);
 * each server's index follows the directory (re-scanned when its mtime changes), and a
 * checkpoint another server deleted is a miss, not an error. Only regular files are opened
 * (O_NOFOLLOW | O_NONBLOCK, then fstat): a FIFO or symlink named *.rlstate is ignored. The
 * directory and its missing parents are created (0700).
 *
 * Several servers may share one directory (replicas behind a load balancer): statefile_best reads
 * the directory again first, so a checkpoint another server saved is found (names of this model
 * start with its fingerprint: only new ones are opened) and one it removed is forgotten; a file
 * that vanishes between the lookup and the restore is a miss, not an error; the size cap counts
 * every file of this model in the directory (the victim's use time is read from the file first).
 *
 * Restoring is exact: the engine's exactness contract makes the continuation bit-identical to a
 * cold evaluation of the same tokens (tests/c/test_statefile.c checks the logits).
 */
#ifndef RL_STATEFILE_H
#define RL_STATEFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "run/engine.h"
#include "gguf/gguf.h"

typedef struct statefile_dir statefile_dir;

/* Identity of a model's content: sizes + header/tensor-table hash of every part + a full hash
 * of every part's tensor data (all bytes, multi-threaded; about the time of reading the file
 * once). The data hash is cached in cache_dir/.model-hashes by file identity (device, inode,
 * size, mtime), so later calls do not read the weights again; cache_dir NULL: no cache;
 * created if missing. 0 with rl_lasterr set if the weights cannot be read. */
uint64_t statefile_model_fingerprint(const gguf_file *f, const char *cache_dir);

/* Open (create) DIR for checkpoints of this model and context format. max_bytes 0 = 8 GiB.
 * NULL with rl_lasterr set if the directory cannot be used. */
statefile_dir *statefile_open(const char *dir, uint64_t max_bytes, uint64_t model_fp, const char *format);
void statefile_close(statefile_dir *d);

/* Save c's state with tokens[0..n): the current one (snap NULL, n == engine_pos(c)) or the one
 * of snapshot snap taken from c (n == engine_snapshot_pos(snap); see engine_state_export_snapshot).
 * 0 or -1. */
int statefile_save(statefile_dir *d, engine_ctx *c, const engine_snapshot *snap, const int32_t *tokens,
                   int n);
/* Position of the longest saved state whose tokens are a prefix of tokens[0..n), at most max_pos
 * and more than min_pos; 0 if none. Reads the directory listing (new files of this model: their
 * header and tokens); the token lists are indexed in memory. */
int statefile_best(statefile_dir *d, const int32_t *tokens, int n, int min_pos, int max_pos);
/* Import that state into c. Returns its position (> 0), 0 if there is none or its file is gone
 * (c untouched), or
 * -1 if the file failed to read or verify (deleted, c reset to position 0, rl_lasterr set). */
int statefile_restore(statefile_dir *d, engine_ctx *c, const int32_t *tokens, int n, int min_pos,
                      int max_pos);

typedef struct {
    int n_files;
    uint64_t bytes;
    long long saves, restores, rejected; /* rejected: failed to verify */
    double save_s, restore_s;
} statefile_stats;
void statefile_get_stats(const statefile_dir *d, statefile_stats *st);

/* Low-level, for tests: write / read one file. */
int statefile_write(const char *path, uint64_t model_fp, const char *format, const int32_t *tokens, int n,
                    const void *state, uint64_t state_bytes);
#endif
