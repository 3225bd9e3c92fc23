/* bus/keys.h: CURVE key files (docs/FORMATS.md §5): who a program is, which servers it
 * trusts, which clients a server accepts.
 *
 *   PREFIX.key   the key pair, "public <Z85>" and "secret <Z85>" lines; mode 0600, and a
 *                file that others may read is refused (like ssh's private keys)
 *   PREFIX.pub   one line "<Z85 public key> <name>": what others put in their lists
 *   trust file   lines "<endpoint pattern> <Z85 server public key>" (fnmatch patterns, first
 *                match wins): the servers a client trusts, by where it connects
 *   authorized   lines starting with a Z85 client public key (so `cat *.pub` makes one)
 *
 * A line starting with '#' is a comment ('#' is a Z85 digit, but never a key's first: the
 * first digit of a 32-bit group is at most 82 of 84); blank lines are ignored. Keys are 40 characters of Z85 (32
 * bytes). Every function returns 0 or BUS_ERR_REFUSED with one line in err naming the file
 * and the line. */
#ifndef BUS_KEYS_H
#define BUS_KEYS_H
#include <stddef.h>

#include "bus/bus.h"

#define BUS_KEY_Z85 41 /* 40 characters and the NUL */

typedef struct {
    char pub[BUS_KEY_Z85], sec[BUS_KEY_Z85];
} bus_keypair_t;

typedef struct {
    char *pattern;          /* an endpoint, or an fnmatch pattern such as tcp://10.0.0.2:* */
    char key[BUS_KEY_Z85];  /* the server's public key */
} bus_trust_t;

/* A new key pair from libsodium's random source (zmq_curve_keypair). */
int bus_keys_generate(bus_keypair_t *kp, char *err, size_t errlen);
/* Writes PREFIX.key (mode 0600) and PREFIX.pub, each atomically (a temporary file in the same
 * directory, fsynced, renamed). An existing file is kept, and is an error, unless force. */
int bus_keys_write(const char *prefix, const bus_keypair_t *kp, const char *name, int force,
                   char *err, size_t errlen);
/* Reads a .key file: both keys present, well-formed and belonging together, and the file not
 * readable or writable by group or others. */
int bus_keys_read_pair(const char *path, bus_keypair_t *kp, char *err, size_t errlen);
/* Reads an authorized-clients file into *keys (malloc'ed, *n entries; free()). */
int bus_keys_read_list(const char *path, char (**keys)[BUS_KEY_Z85], int *n, char *err,
                       size_t errlen);
/* Reads a trust file into *t (malloc'ed, *n entries; release with bus_keys_trust_free). */
int bus_keys_read_trust(const char *path, bus_trust_t **t, int *n, char *err, size_t errlen);
void bus_keys_trust_free(bus_trust_t **t, int n);
/* The key trusted for endpoint (the first pattern that matches), or NULL. */
const char *bus_keys_trusted(const bus_trust_t *t, int n, const char *endpoint);
/* 1 when s is a 40-character Z85 string that decodes to a 32-byte key. */
int bus_keys_valid(const char *s);
#endif
