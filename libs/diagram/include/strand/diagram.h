/*
 * diagram.h - libs/diagram, beside the engine: a definition drawn as a graph
 * (Graphviz), with an optional overlay of one instance: the nodes on the path it took
 * ("visited") and where it waits now ("waiting"). Pure: no I/O besides Graphviz's
 * in-memory layout; no libevent. The one place outside libs/engine that knows the
 * canonical forms of all three definition kinds; the API calls it.
 *
 * Nodes carry stable SVG ids: "step-<step id>" for flow steps, "state-<name>" for
 * lifecycle and process states, "start" and "end". The overlay sets the SVG class
 * ("visited", "waiting", and "failed" for the step a failed flow failed in) and the
 * fill colour. Flows draw their canonical steps
 * (sequence, branches, loops, parallel branches); lifecycles their states and
 * transitions; processes their states and `next` edges.
 */
#ifndef STRAND_DIAGRAM_H
#define STRAND_DIAGRAM_H

#include <jansson.h>
#include <stddef.h>

#include "strand/err.h"

/* Most nodes a diagram may be set to draw (STRAND_DIAGRAM_MAX_NODES' ceiling), and the
 * default: a larger definition is refused (ST_ERR_INVALID). Laying out costs time
 * that grows faster than the node count (1,902 steps took 10-27 s), so the API draws
 * on its command pool, one diagram at a time, and refuses more than the setting. */
#define ST_DIAGRAM_MAX_NODES 2000
#define ST_DIAGRAM_DEFAULT_MAX_NODES 500

/* Sets the node limit (10 to ST_DIAGRAM_MAX_NODES; other values are clamped). Not
 * thread-safe: call at start-up. */
void st_diagram_set_max_nodes(int max_nodes);

/* Builds the DOT text for `canonical` (a stored canonical definition, borrowed).
 * `snapshot` (may be NULL) is the instance's runtime snapshot and `done_tasks` (may be
 * NULL) a JSON array of the names of its completed tasks; with either, the overlay is
 * drawn. On success *out is a new string (caller frees with free()). ST_ERR_INVALID
 * when the definition is not drawable (unknown kind, too large). */
st_err_t st_diagram_dot(const json_t *canonical, const json_t *snapshot,
                        const json_t *done_tasks, char **out, st_errbuf_t *eb);

/* Lays out `dot` with Graphviz's dot engine and renders SVG. On success *svg is a new
 * NUL-terminated buffer of *len bytes (caller frees with st_diagram_free()).
 * ST_ERR_RETRY when another thread is drawing right now (Graphviz is not reentrant):
 * the caller answers 503 rather than holding a thread in the queue. */
st_err_t st_diagram_svg(const char *dot, char **svg, size_t *len, st_errbuf_t *eb);
void st_diagram_free(char *svg);

#endif
