/* auth.c - bearer tokens to principals (see auth.h). */
#include "strand/auth.h"

#include <openssl/sha.h>
#include <pthread.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    unsigned char digest[SHA256_DIGEST_LENGTH];   /* of the token */
    st_principal_t principal;                     /* .grants points at `grants` */
    st_grant_t *grants;                           /* owned */
} token_entry_t;

/* A role the file's "roles" object defines. */
typedef struct {
    char name[64];
    unsigned perms;
    int ngrants;
    st_grant_t *grants;   /* owned */
} role_def_t;

/* One reading of the token file. A reload makes a new one; the old ones stay until
 * st_auth_free(), since principals handed out point at their grants. */
typedef struct table {
    int enabled;
    size_t count;
    token_entry_t *entries;
    size_t nroles;
    role_def_t *roles;
    struct table *older;   /* the table this one replaced */
} table_t;

struct st_auth {
    table_t *current;       /* read without a lock: swapped atomically, never freed early */
    pthread_mutex_t lock;   /* serialises reloads */
    char path[1024];        /* "" = authentication off */
    struct stat seen;       /* the file as last read (or tried), for the change check */
};

#define PERM_BIT(p) (1u << (p))
#define PERMS_ALL ((1u << ST_PERM_COUNT) - 1u)

static const char *const perm_names[ST_PERM_COUNT] = {
    [ST_PERM_DEFINITIONS_READ] = "definitions:read",
    [ST_PERM_DEFINITIONS_WRITE] = "definitions:write",
    [ST_PERM_INSTANCES_READ] = "instances:read",
    [ST_PERM_INSTANCES_START] = "instances:start",
    [ST_PERM_INSTANCES_SIGNAL] = "instances:signal",
    [ST_PERM_INSTANCES_OPERATE] = "instances:operate",
    [ST_PERM_INSTANCES_TERMINATE] = "instances:terminate",
    [ST_PERM_TASKS_READ] = "tasks:read",
    [ST_PERM_TASKS_ACT] = "tasks:act",
    [ST_PERM_ACKS_SEND] = "acks:send",
    [ST_PERM_DEAD_LETTERS_READ] = "dead-letters:read",
    [ST_PERM_DEAD_LETTERS_OPERATE] = "dead-letters:operate",
    [ST_PERM_TRIGGERS_SEND] = "triggers:send",
    [ST_PERM_AUDIT_READ] = "audit:read",
    [ST_PERM_ADMIN] = "admin",
};

/* The built-in roles (a token file may not redefine them), and what a role name that
 * is neither built in nor defined grants: a task role, which acts on its tasks. */
#define PERMS_OPERATOR                                                                    \
    (PERM_BIT(ST_PERM_INSTANCES_READ) | PERM_BIT(ST_PERM_INSTANCES_START) |               \
     PERM_BIT(ST_PERM_INSTANCES_SIGNAL) | PERM_BIT(ST_PERM_INSTANCES_OPERATE) |           \
     PERM_BIT(ST_PERM_INSTANCES_TERMINATE) | PERM_BIT(ST_PERM_DEAD_LETTERS_READ) |        \
     PERM_BIT(ST_PERM_DEAD_LETTERS_OPERATE) | PERM_BIT(ST_PERM_TASKS_READ) |              \
     PERM_BIT(ST_PERM_DEFINITIONS_READ) | PERM_BIT(ST_PERM_AUDIT_READ))
#define PERMS_VIEWER                                                                      \
    (PERM_BIT(ST_PERM_DEFINITIONS_READ) | PERM_BIT(ST_PERM_INSTANCES_READ) |              \
     PERM_BIT(ST_PERM_TASKS_READ) | PERM_BIT(ST_PERM_DEAD_LETTERS_READ) |                 \
     PERM_BIT(ST_PERM_AUDIT_READ))
#define PERMS_TASK_ROLE                                                                   \
    (PERM_BIT(ST_PERM_TASKS_READ) | PERM_BIT(ST_PERM_TASKS_ACT) |                         \
     PERM_BIT(ST_PERM_INSTANCES_READ))

static const struct {
    const char *name;
    unsigned perms;
} builtin_roles[] = {{"admin", PERMS_ALL}, {"operator", PERMS_OPERATOR}, {"viewer", PERMS_VIEWER}};

const char *st_perm_name(st_perm_t perm)
{
    return (unsigned)perm < ST_PERM_COUNT ? perm_names[perm] : "unknown";
}

static int builtin_role(const char *name, unsigned *perms)
{
    for (size_t i = 0; i < sizeof builtin_roles / sizeof builtin_roles[0]; i++)
        if (strcmp(builtin_roles[i].name, name) == 0) {
            *perms = builtin_roles[i].perms;
            return 1;
        }
    return 0;
}

/* Only these groups name definitions (a grant "@definition" makes sense for them). */
static int perm_scopable(st_perm_t p)
{
    return strncmp(perm_names[p], "definitions:", 12) == 0 ||
           strncmp(perm_names[p], "instances:", 10) == 0 ||
           strncmp(perm_names[p], "tasks:", 6) == 0 || p == ST_PERM_TRIGGERS_SEND;
}

static int add_grant(st_grant_t **grants, int *n, st_perm_t p, const char *scope,
                     const char *qualifier)
{
    st_grant_t *more = realloc(*grants, (size_t)(*n + 1) * sizeof *more);
    if (more == NULL)
        return 0;
    *grants = more;
    st_grant_t *g = &more[(*n)++];
    memset(g, 0, sizeof *g);
    g->perm = p;
    snprintf(g->scope, sizeof g->scope, "%s", scope);
    snprintf(g->qualifier, sizeof g->qualifier, "%s", qualifier);
    return 1;
}

/* Adds the permission text `text` ("instances:*@orders", "acks:send:billing") to
 * `perms` (unlimited) or `grants` (limited). On a bad one sets eb (naming `where`). */
static st_err_t parse_permission(const char *text, const char *where, unsigned *perms,
                                 st_grant_t **grants, int *ngrants, st_errbuf_t *eb)
{
    char base[128];
    const char *at = strchr(text, '@');
    const char *scope = at ? at + 1 : "";
    size_t blen = at ? (size_t)(at - text) : strlen(text);
    if (blen >= sizeof base || strlen(scope) >= sizeof((st_grant_t *)0)->scope ||
        (at != NULL && *scope == '\0'))
        return st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: %s: \"%s\" is not a permission "
                          "(\"<permission>\" or \"<permission>@<definition>\")", where, text);
    memcpy(base, text, blen);
    base[blen] = '\0';
    const char *qualifier = "";
    unsigned set = 0;
    if (strncmp(base, "acks:send:", 10) == 0 && base[10] != '\0' &&
        strlen(base + 10) < sizeof((st_grant_t *)0)->qualifier) {
        qualifier = text + 10;
        base[9] = '\0';
    }
    size_t glen = strlen(base);
    int group = glen > 2 && strcmp(base + glen - 2, ":*") == 0;
    for (int p = 0; p < ST_PERM_COUNT; p++) {
        if (group ? strncmp(perm_names[p], base, glen - 1) == 0 : strcmp(perm_names[p], base) == 0)
            set |= PERM_BIT(p);
    }
    if (set == 0)
        return st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: %s: unknown permission \"%s\" "
                          "(docs/api.md lists them)", where, text);
    char qual[64] = "";
    if (*qualifier != '\0')
        snprintf(qual, sizeof qual, "%.*s", (int)(blen - 10), qualifier);
    if (*scope == '\0' && *qual == '\0') {
        *perms |= set;
        return ST_OK;
    }
    for (int p = 0; p < ST_PERM_COUNT; p++) {
        if (!(set & PERM_BIT(p)))
            continue;
        if (*scope != '\0' && !perm_scopable(p))
            return st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: %s: \"%s\": %s cannot be "
                              "limited to a definition", where, text, perm_names[p]);
        if (!add_grant(grants, ngrants, (st_perm_t)p, scope, qual))
            return st_err_set(eb, ST_ERR_NOMEM, "could not allocate a grant");
    }
    return ST_OK;
}

/* Reads the optional "roles" object into auth->roles. */
static st_err_t load_roles(table_t *auth, const json_t *roles, st_errbuf_t *eb)
{
    if (roles == NULL)
        return ST_OK;
    if (!json_is_object(roles))
        return st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: \"roles\" must be an object of "
                          "role name -> array of permissions");
    auth->roles = calloc(json_object_size(roles) + 1, sizeof *auth->roles);
    if (auth->roles == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the role table");
    const char *name;
    json_t *list;
    json_object_foreach((json_t *)roles, name, list) {
        role_def_t *r = &auth->roles[auth->nroles++];
        unsigned ignored;
        if (*name == '\0' || strlen(name) >= sizeof r->name)
            return st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: /roles: a role name must have "
                              "1 to 63 characters");
        if (builtin_role(name, &ignored))
            return st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: /roles/%s: a built-in role "
                              "(admin, operator, viewer) cannot be redefined", name);
        snprintf(r->name, sizeof r->name, "%s", name);
        if (!json_is_array(list))
            return st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: /roles/%s must be an array of "
                              "permissions", name);
        size_t i;
        json_t *perm;
        json_array_foreach(list, i, perm) {
            char where[128];
            snprintf(where, sizeof where, "/roles/%s/%zu", name, i);
            if (!json_is_string(perm))
                return st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: %s must be a string", where);
            st_err_t err = parse_permission(json_string_value(perm), where, &r->perms, &r->grants,
                                            &r->ngrants, eb);
            if (err != ST_OK)
                return err;
        }
    }
    return ST_OK;
}

/* Gives the token entry the permissions of its roles. */
static st_err_t resolve_roles(const table_t *auth, token_entry_t *e, st_errbuf_t *eb)
{
    st_principal_t *who = &e->principal;
    int n = 0;
    for (int i = 0; i < who->nroles; i++) {
        unsigned perms;
        if (builtin_role(who->roles[i], &perms)) {
            who->perms |= perms;
            continue;
        }
        const role_def_t *r = NULL;
        for (size_t k = 0; k < auth->nroles && r == NULL; k++)
            if (strcmp(auth->roles[k].name, who->roles[i]) == 0)
                r = &auth->roles[k];
        if (r == NULL) {
            who->perms |= PERMS_TASK_ROLE;
            continue;
        }
        who->perms |= r->perms;
        for (int g = 0; g < r->ngrants; g++)
            if (!add_grant(&e->grants, &n, r->grants[g].perm, r->grants[g].scope,
                           r->grants[g].qualifier))
                return st_err_set(eb, ST_ERR_NOMEM, "could not allocate a grant");
    }
    who->ngrants = n;
    who->grants = e->grants;
    return ST_OK;
}

static int hex_decode(const char *hex, unsigned char *out, size_t len)
{
    if (strlen(hex) != len * 2)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned int byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1)
            return 0;
        out[i] = (unsigned char)byte;
    }
    return 1;
}

static void table_free(table_t *auth);

/* Reads the token file at `path` into a new table (*out, freed with table_free()). */
static st_err_t table_load(const char *path, table_t **out, st_errbuf_t *eb)
{
    table_t *auth = calloc(1, sizeof *auth);
    if (auth == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the token table");
    if (path == NULL || *path == '\0') {
        *out = auth;
        return ST_OK;
    }
    json_error_t jerr;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    json_t *tokens = json_object_get(doc, "tokens");
    st_err_t err = ST_OK;
    if (doc == NULL)
        err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE %s: %s (line %d)", path, jerr.text,
                         jerr.line);
    else if (!json_is_array(tokens) || json_array_size(tokens) == 0)
        err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE %s: \"tokens\" must be a non-empty array",
                         path);
    else
        err = load_roles(auth, json_object_get(doc, "roles"), eb);
    if (err == ST_OK) {
        auth->count = json_array_size(tokens);
        auth->entries = calloc(auth->count, sizeof *auth->entries);
        if (auth->entries == NULL)
            err = st_err_set(eb, ST_ERR_NOMEM, "could not allocate the token table");
    }
    for (size_t i = 0; err == ST_OK && i < auth->count; i++) {
        json_t *t = json_array_get(tokens, i);
        token_entry_t *e = &auth->entries[i];
        const char *clear = json_string_value(json_object_get(t, "token"));
        const char *hashed = json_string_value(json_object_get(t, "token_sha256"));
        const char *principal = json_string_value(json_object_get(t, "principal"));
        json_t *roles = json_object_get(t, "roles");
        if (principal == NULL || *principal == '\0' || strlen(principal) >= sizeof e->principal.name)
            err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: /tokens/%zu/principal must be a "
                             "non-empty string of at most 127 characters", i);
        else if ((clear == NULL) == (hashed == NULL))
            err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: /tokens/%zu needs exactly one of "
                             "token or token_sha256", i);
        else if (clear != NULL && strlen(clear) < 16)
            err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: /tokens/%zu/token must have at "
                             "least 16 characters", i);
        else if (hashed != NULL && !hex_decode(hashed, e->digest, sizeof e->digest))
            err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: /tokens/%zu/token_sha256 must be "
                             "64 hex digits", i);
        else if (!json_is_array(roles) || json_array_size(roles) > ST_AUTH_MAX_ROLES)
            err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: /tokens/%zu/roles must be an "
                             "array of at most %d strings", i, ST_AUTH_MAX_ROLES);
        if (err != ST_OK)
            break;
        if (clear != NULL)
            SHA256((const unsigned char *)clear, strlen(clear), e->digest);
        snprintf(e->principal.name, sizeof e->principal.name, "%s", principal);
        size_t j;
        json_t *role;
        json_array_foreach(roles, j, role) {
            if (!json_is_string(role) || json_string_length(role) >= sizeof e->principal.roles[0]) {
                err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_AUTH_FILE: /tokens/%zu/roles/%zu must "
                                 "be a string of at most 63 characters", i, j);
                break;
            }
            snprintf(e->principal.roles[e->principal.nroles++], sizeof e->principal.roles[0], "%s",
                     json_string_value(role));
        }
        if (err == ST_OK)
            err = resolve_roles(auth, e, eb);
    }
    json_decref(doc);
    if (err != ST_OK) {
        table_free(auth);
        return err;
    }
    auth->enabled = 1;
    *out = auth;
    return ST_OK;
}

static void table_free(table_t *auth)
{
    if (auth == NULL)
        return;
    for (size_t i = 0; auth->entries != NULL && i < auth->count; i++)
        free(auth->entries[i].grants);
    for (size_t i = 0; i < auth->nroles; i++)
        free(auth->roles[i].grants);
    free(auth->roles);
    free(auth->entries);
    free(auth);
}

st_err_t st_auth_load(const char *path, st_auth_t **out, st_errbuf_t *eb)
{
    st_auth_t *auth = calloc(1, sizeof *auth);
    if (auth == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not allocate the token table");
    pthread_mutex_init(&auth->lock, NULL);
    snprintf(auth->path, sizeof auth->path, "%s", path ? path : "");
    if (auth->path[0] != '\0' && stat(auth->path, &auth->seen) != 0)
        memset(&auth->seen, 0, sizeof auth->seen);
    st_err_t err = table_load(path, &auth->current, eb);
    if (err != ST_OK) {
        pthread_mutex_destroy(&auth->lock);
        free(auth);
        return err;
    }
    *out = auth;
    return ST_OK;
}

void st_auth_free(st_auth_t *auth)
{
    if (auth == NULL)
        return;
    for (table_t *t = auth->current, *older; t != NULL; t = older) {
        older = t->older;
        table_free(t);
    }
    pthread_mutex_destroy(&auth->lock);
    free(auth);
}

/* Reloads under auth->lock; `force` = 0 reads the file only when it changed. */
static st_err_t reload_locked(st_auth_t *auth, int force, int *reloaded, st_errbuf_t *eb)
{
    struct stat now;
    if (stat(auth->path, &now) != 0)
        memset(&now, 0, sizeof now);
    if (!force && now.st_ino == auth->seen.st_ino && now.st_dev == auth->seen.st_dev &&
        now.st_size == auth->seen.st_size && now.st_mtim.tv_sec == auth->seen.st_mtim.tv_sec &&
        now.st_mtim.tv_nsec == auth->seen.st_mtim.tv_nsec)
        return ST_OK;
    auth->seen = now;   /* a bad file is reported once, not at every check */
    table_t *fresh = NULL;
    st_err_t err = table_load(auth->path, &fresh, eb);
    if (err != ST_OK)
        return err;
    fresh->older = auth->current;
    __atomic_store_n(&auth->current, fresh, __ATOMIC_RELEASE);
    *reloaded = 1;
    return ST_OK;
}

st_err_t st_auth_reload(st_auth_t *auth, int force, int *reloaded, st_errbuf_t *eb)
{
    *reloaded = 0;
    if (auth == NULL || auth->path[0] == '\0')
        return ST_OK;
    pthread_mutex_lock(&auth->lock);
    st_err_t err = reload_locked(auth, force, reloaded, eb);
    pthread_mutex_unlock(&auth->lock);
    return err;
}

/* The current table; borrowed, valid until st_auth_free(). */
static const table_t *current(const st_auth_t *auth)
{
    return __atomic_load_n(&auth->current, __ATOMIC_ACQUIRE);
}

int st_auth_enabled(const st_auth_t *auth)
{
    return auth != NULL && current(auth)->enabled;
}

st_err_t st_auth_authenticate(const st_auth_t *auth, const char *token, st_principal_t *who)
{
    memset(who, 0, sizeof *who);
    if (!st_auth_enabled(auth)) {
        snprintf(who->name, sizeof who->name, "anonymous");
        snprintf(who->roles[0], sizeof who->roles[0], "admin");
        who->nroles = 1;
        who->perms = PERMS_ALL;
        return ST_OK;
    }
    if (token == NULL || *token == '\0')
        return ST_ERR_UNAUTHORIZED;
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)token, strlen(token), digest);
    const table_t *table = current(auth);
    const token_entry_t *found = NULL;
    for (size_t i = 0; i < table->count; i++) {
        /* Compare every byte of every entry: no early exit on a partial match. */
        unsigned char diff = 0;
        for (size_t k = 0; k < sizeof digest; k++)
            diff |= (unsigned char)(digest[k] ^ table->entries[i].digest[k]);
        if (diff == 0 && found == NULL)
            found = &table->entries[i];
    }
    if (found == NULL)
        return ST_ERR_UNAUTHORIZED;
    *who = found->principal;
    return ST_OK;
}

const char *st_auth_bearer(const char *header)
{
    if (header == NULL || strncasecmp(header, "Bearer ", 7) != 0)
        return NULL;
    header += 7;
    while (*header == ' ')
        header++;
    for (const char *p = header; *p; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e)
            return NULL;   /* control characters, spaces, bytes outside ASCII */
    return *header ? header : NULL;
}

int st_principal_has_role(const st_principal_t *who, const char *role)
{
    if (who->perms & PERM_BIT(ST_PERM_ADMIN))
        return 1;
    for (int i = 0; i < who->nroles; i++)
        if (strcmp(who->roles[i], role) == 0)
            return 1;
    return 0;
}

int st_principal_has_any_role(const st_principal_t *who, const json_t *roles)
{
    if (st_principal_has_role(who, "admin"))
        return 1;
    size_t i;
    json_t *role;
    json_array_foreach(roles, i, role)
        if (json_is_string(role) && st_principal_has_role(who, json_string_value(role)))
            return 1;
    return 0;
}

st_holds_t st_principal_holds(const st_principal_t *who, st_perm_t perm)
{
    if (who->perms & (PERM_BIT(ST_PERM_ADMIN) | PERM_BIT(perm)))
        return ST_HOLDS_ALL;
    for (int i = 0; i < who->ngrants; i++)
        if (who->grants[i].perm == perm)
            return ST_HOLDS_SOME;
    return ST_HOLDS_NONE;
}

int st_principal_may(const st_principal_t *who, st_perm_t perm, const char *definition,
                     const char *consumer)
{
    if (who->perms & (PERM_BIT(ST_PERM_ADMIN) | PERM_BIT(perm)))
        return 1;
    for (int i = 0; i < who->ngrants; i++) {
        const st_grant_t *g = &who->grants[i];
        if (g->perm != perm)
            continue;
        if (g->scope[0] != '\0' && (definition == NULL || strcmp(g->scope, definition) != 0))
            continue;
        if (g->qualifier[0] != '\0' && (consumer == NULL || strcmp(g->qualifier, consumer) != 0))
            continue;
        return 1;
    }
    return 0;
}

int st_auth_principal_may(const st_auth_t *auth, const char *name, st_perm_t perm,
                          const char *definition)
{
    if (!st_auth_enabled(auth))
        return 1;
    if (name == NULL)
        return 0;
    const table_t *table = current(auth);
    for (size_t i = 0; i < table->count; i++)
        if (strcmp(table->entries[i].principal.name, name) == 0 &&
            st_principal_may(&table->entries[i].principal, perm, definition, NULL))
            return 1;
    return 0;
}
