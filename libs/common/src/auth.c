/* auth.c - bearer tokens to principals (see auth.h). */
#include "strand/auth.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    unsigned char digest[SHA256_DIGEST_LENGTH];   /* of the token */
    st_principal_t principal;
} token_entry_t;

struct st_auth {
    int enabled;
    size_t count;
    token_entry_t *entries;
};

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

st_err_t st_auth_load(const char *path, st_auth_t **out, st_errbuf_t *eb)
{
    st_auth_t *auth = calloc(1, sizeof *auth);
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
    }
    json_decref(doc);
    if (err != ST_OK) {
        st_auth_free(auth);
        return err;
    }
    auth->enabled = 1;
    *out = auth;
    return ST_OK;
}

void st_auth_free(st_auth_t *auth)
{
    if (auth == NULL)
        return;
    free(auth->entries);
    free(auth);
}

int st_auth_enabled(const st_auth_t *auth)
{
    return auth != NULL && auth->enabled;
}

st_err_t st_auth_authenticate(const st_auth_t *auth, const char *token, st_principal_t *who)
{
    memset(who, 0, sizeof *who);
    if (!st_auth_enabled(auth)) {
        snprintf(who->name, sizeof who->name, "anonymous");
        snprintf(who->roles[0], sizeof who->roles[0], "admin");
        who->nroles = 1;
        return ST_OK;
    }
    if (token == NULL || *token == '\0')
        return ST_ERR_UNAUTHORIZED;
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)token, strlen(token), digest);
    const token_entry_t *found = NULL;
    for (size_t i = 0; i < auth->count; i++) {
        /* Compare every byte of every entry: no early exit on a partial match. */
        unsigned char diff = 0;
        for (size_t k = 0; k < sizeof digest; k++)
            diff |= (unsigned char)(digest[k] ^ auth->entries[i].digest[k]);
        if (diff == 0 && found == NULL)
            found = &auth->entries[i];
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
    for (int i = 0; i < who->nroles; i++)
        if (strcmp(who->roles[i], "admin") == 0 || strcmp(who->roles[i], role) == 0)
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
