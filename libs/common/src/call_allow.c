/* call_allow.c - the outbound call allow-list (see call_allow.h). */
#include "strand/call_allow.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum { ENTRY_HOST, ENTRY_CIDR, ENTRY_ANY } entry_kind_t;

typedef struct {
    entry_kind_t kind;
    char host[256];          /* ENTRY_HOST: lower case, no brackets */
    int port;                /* ENTRY_HOST: -1 = any */
    int family;              /* ENTRY_CIDR: AF_INET or AF_INET6 */
    unsigned char net[16];   /* ENTRY_CIDR: network bytes */
    int prefix;              /* ENTRY_CIDR: prefix length */
} entry_t;

typedef struct {
    entry_t *entries;
    int n;
} list_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static list_t g_list;

static int parse_port(const char *s, int *port)
{
    if (*s == '\0' || strlen(s) > 5)
        return 0;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    *port = atoi(s);
    return *port > 0 && *port <= 65535;
}

static int host_chars_ok(const char *h)
{
    if (*h == '\0')
        return 0;
    for (const char *p = h; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_' && *p != ':')
            return 0;
    return 1;
}

/* Parses one trimmed entry into `e`; returns 1 when it is well formed. */
static int parse_entry(const char *text, entry_t *e)
{
    memset(e, 0, sizeof *e);
    e->port = -1;
    if (strcmp(text, "*") == 0) {
        e->kind = ENTRY_ANY;
        return 1;
    }
    const char *slash = strchr(text, '/');
    if (slash != NULL) {
        char addr[64];
        size_t len = (size_t)(slash - text);
        if (len == 0 || len >= sizeof addr)
            return 0;
        memcpy(addr, text, len);
        addr[len] = '\0';
        int prefix;
        if (!parse_port(slash + 1, &prefix) && strcmp(slash + 1, "0") != 0)
            return 0;
        if (strcmp(slash + 1, "0") == 0)
            prefix = 0;
        e->kind = ENTRY_CIDR;
        if (inet_pton(AF_INET, addr, e->net) == 1) {
            e->family = AF_INET;
            if (prefix > 32)
                return 0;
        } else if (inet_pton(AF_INET6, addr, e->net) == 1) {
            e->family = AF_INET6;
            if (prefix > 128)
                return 0;
        } else {
            return 0;
        }
        e->prefix = prefix;
        return 1;
    }
    e->kind = ENTRY_HOST;
    char host[256];
    const char *port_text = NULL;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || (size_t)(close - text - 1) >= sizeof host)
            return 0;
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
        if (close[1] == ':')
            port_text = close + 2;
        else if (close[1] != '\0')
            return 0;
    } else {
        const char *colon = strchr(text, ':');
        if (colon != NULL && strchr(colon + 1, ':') == NULL) {   /* host:port */
            if ((size_t)(colon - text) >= sizeof host)
                return 0;
            memcpy(host, text, (size_t)(colon - text));
            host[colon - text] = '\0';
            port_text = colon + 1;
        } else {                                                  /* name or bare IPv6 */
            if (strlen(text) >= sizeof host)
                return 0;
            snprintf(host, sizeof host, "%s", text);
        }
    }
    unsigned char v6[16];
    if (!host_chars_ok(host) || (strchr(host, ':') != NULL && inet_pton(AF_INET6, host, v6) != 1))
        return 0;   /* a host with a colon must be an IPv6 literal */
    if (port_text != NULL && !parse_port(port_text, &e->port))
        return 0;
    for (char *p = host; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    snprintf(e->host, sizeof e->host, "%s", host);
    return 1;
}

st_err_t st_call_allow_set(const char *spec, st_errbuf_t *eb)
{
    list_t fresh = {NULL, 0};
    if (spec != NULL && *spec != '\0') {
        char *copy = strdup(spec);
        int cap = 1;
        for (const char *p = spec; *p; p++)
            cap += *p == ',';
        fresh.entries = calloc((size_t)cap, sizeof *fresh.entries);
        if (copy == NULL || fresh.entries == NULL) {
            free(copy);
            free(fresh.entries);
            return st_err_set(eb, ST_ERR_NOMEM, "out of memory");
        }
        char *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            while (isspace((unsigned char)*tok))
                tok++;
            char *end = tok + strlen(tok);
            while (end > tok && isspace((unsigned char)end[-1]))
                *--end = '\0';
            if (*tok == '\0')
                continue;
            if (!parse_entry(tok, &fresh.entries[fresh.n])) {
                st_err_set(eb, ST_ERR_CONFIG,
                           "STRAND_CALL_ALLOW: \"%.100s\" is not a host, host:port or CIDR", tok);
                free(copy);
                free(fresh.entries);
                return ST_ERR_CONFIG;
            }
            fresh.n++;
        }
        free(copy);
    }
    pthread_mutex_lock(&g_lock);
    list_t old = g_list;
    g_list = fresh;
    pthread_mutex_unlock(&g_lock);
    free(old.entries);
    return ST_OK;
}

st_err_t st_call_allow_load_env(st_errbuf_t *eb)
{
    return st_call_allow_set(getenv("STRAND_CALL_ALLOW"), eb);
}

/* Names the class of an IPv4 address Strand refuses by default, or NULL. */
static const char *v4_class(const unsigned char *a)
{
    if (a[0] == 0)
        return "unspecified";
    if (a[0] == 127)
        return "loopback";
    if (a[0] == 169 && a[1] == 254)
        return "link-local";
    if (a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) || (a[0] == 192 && a[1] == 168))
        return "private";
    if (a[0] == 100 && (a[1] & 0xc0) == 64)
        return "private";   /* carrier-grade NAT, 100.64/10 */
    if (a[0] >= 224 && a[0] <= 239)
        return "multicast";
    if (a[0] >= 240)
        return "reserved";
    return NULL;
}

/* The same for IPv6; IPv4-mapped and NAT64 addresses are judged by their IPv4 part. */
static const char *v6_class(const unsigned char *a)
{
    static const unsigned char zero[16];
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (memcmp(a, zero, 16) == 0)
        return "unspecified";
    if (memcmp(a, zero, 15) == 0 && a[15] == 1)
        return "loopback";
    if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
        return v4_class(a + 12) ? v4_class(a + 12) : NULL;
    if (memcmp(a, zero, 12) == 0)
        return "reserved";   /* IPv4-compatible, deprecated */
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
        return "link-local";
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
        return "private";    /* site-local, deprecated */
    if ((a[0] & 0xfe) == 0xfc)
        return "private";    /* unique local, fc00::/7 */
    if (a[0] == 0xff)
        return "multicast";
    return NULL;
}

static int prefix_match(const unsigned char *addr, const unsigned char *net, int prefix)
{
    int bytes = prefix / 8, bits = prefix % 8;
    if (memcmp(addr, net, (size_t)bytes) != 0)
        return 0;
    if (bits == 0)
        return 1;
    unsigned char mask = (unsigned char)(0xff << (8 - bits));
    return (addr[bytes] & mask) == (net[bytes] & mask);
}

int st_call_allow_check(const char *url_host, int port, const struct sockaddr *addr,
                        char *why, size_t why_len)
{
    const unsigned char *bytes;
    const char *cls;
    char text[INET6_ADDRSTRLEN] = "?";
    int family = addr ? addr->sa_family : AF_UNSPEC;
    if (family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        bytes = (const unsigned char *)&in->sin_addr;
        cls = v4_class(bytes);
        inet_ntop(AF_INET, bytes, text, sizeof text);
    } else if (family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        bytes = (const unsigned char *)&in6->sin6_addr;
        cls = v6_class(bytes);
        inet_ntop(AF_INET6, bytes, text, sizeof text);
    } else {
        snprintf(why, why_len, "calls connect over IPv4 or IPv6 only");
        return 0;
    }
    if (cls == NULL)
        return 1;
    int allowed = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_list.n && !allowed; i++) {
        const entry_t *e = &g_list.entries[i];
        if (e->kind == ENTRY_ANY)
            allowed = 1;
        else if (e->kind == ENTRY_HOST)
            allowed = url_host != NULL && strcasecmp(e->host, url_host) == 0 &&
                      (e->port < 0 || e->port == port);
        else if (e->family == family)
            allowed = prefix_match(bytes, e->net, e->prefix);
    }
    pthread_mutex_unlock(&g_lock);
    if (!allowed)
        snprintf(why, why_len,
                 "call refused: %s resolves to %s, a %s address not in STRAND_CALL_ALLOW",
                 url_host ? url_host : "?", text, cls);
    return allowed;
}
