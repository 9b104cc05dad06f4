/*
 * routes.c - the API's route table: every handler module registers its routes here,
 * and nothing else calls the *_register functions. main.c calls this once at start-up
 * (and once for --check-openapi).
 */
#include "api.h"

void st_api_register_routes(st_api_t *api)
{
    st_api_openapi_register(api);
    st_api_definitions_register(api);
    st_api_reads_register(api);   /* before instances: GET /v1/instances/stuck */
    st_api_instances_register(api);
    st_api_signals_register(api);
    st_api_dead_letters_register(api);
    st_api_tasks_register(api);
    st_api_acks_register(api);
    st_api_triggers_register(api);
    st_api_retention_register(api);
    st_api_rpc_register(api);
    st_api_batches_register(api);
    st_api_repair_register(api);
    st_api_pause_register(api);
    st_api_console_register(api);
}
