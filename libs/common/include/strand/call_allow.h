/*
 * call_allow.h - where outbound calls may go (STRAND_CALL_ALLOW).
 *
 * Every call Strand makes to a worker (flow call steps, process callbacks, the API's
 * RPCs) goes through worker_http.c, which asks this module about the address it is
 * about to connect to, after DNS resolution, so a name that resolves (or re-resolves)
 * to an internal address is caught. Public unicast addresses are always allowed.
 * Loopback (127/8, ::1), link-local (169.254/16 including cloud metadata, fe80::/10),
 * private (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7), unspecified (0/8, ::),
 * multicast and reserved (240/4, broadcast) addresses are refused unless the
 * allow-list names them.
 *
 * The allow-list is a comma-separated list of entries (spaces around entries ignored):
 *   host          a host name or IP literal as written in the call's URL ("worker",
 *                 "127.0.0.1", "[::1]"), any port; case-insensitive
 *   host:port     the same, only on that port ("127.0.0.1:8081", "[::1]:8081")
 *   a.b.c.d/n     an IPv4 CIDR the connected address may fall in, any port
 *   x:y::/n       an IPv6 CIDR
 *   *             any address (development only)
 * A host entry allows whatever that name resolves to, so list only names the operator
 * controls. Redirects are never followed.
 */
#ifndef STRAND_CALL_ALLOW_H
#define STRAND_CALL_ALLOW_H

#include <sys/socket.h>

#include "strand/err.h"

/* The error code a refused call reports (in its result's "code"). */
#define ST_CALL_REFUSED_CODE "call_refused"

/* Parses `spec` (NULL or "" = empty list) and makes it the process's allow-list,
 * replacing the previous one. Returns ST_ERR_CONFIG with `eb` naming the bad entry and
 * keeps the previous list when `spec` does not parse. Thread-safe. */
st_err_t st_call_allow_set(const char *spec, st_errbuf_t *eb);

/* Loads STRAND_CALL_ALLOW from the environment (as st_call_allow_set()). */
st_err_t st_call_allow_load_env(st_errbuf_t *eb);

/* Decides whether a call to `url_host` (the host as written in the URL, without
 * brackets) on `port` may connect to `addr`. Returns 1 to allow; 0 to refuse, with
 * the reason written to `why` (NUL-terminated, at most `why_len` bytes). */
int st_call_allow_check(const char *url_host, int port, const struct sockaddr *addr,
                        char *why, size_t why_len);

#endif
