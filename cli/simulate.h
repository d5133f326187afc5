/* SPDX-License-Identifier: MIT */
/* `slidedp simulate` (cli/simulate.c, docs/simulation.md): a run on a described machine through
 * StarPU's SimGrid mode, and the pieces the simulation build needs. */
#ifndef SDP_CLI_SIMULATE_H
#define SDP_CLI_SIMULATE_H

/* The simulated node: its cores and GPUs, each GPU's memory and links (bytes/s). */
struct sdp_sim_machine {
    int cpus, gpus;
    unsigned long long gpu_mem_bytes;
    char gpu_name[128];
    double h2d_bps, d2h_bps;         /* one GPU alone, per direction */
    double h2d_all_bps, d2h_all_bps; /* the host link all GPUs share, summed over them */
    double nvlink_bps;               /* GPU to GPU per direction; 0: through the host */
    double host_mem_bytes;           /* host memory a run may take */
};

/** Write the platform description and the bus matrices of s for StarPU's host name `host` into
 * busdir (cli/sim_platform.c).  @return 0 or a negative errno (logged with the file) */
int sdp_sim_platform_write(const char *busdir, const char *host, const struct sdp_sim_machine *s);

/** sdp_tasks_init(), with in a simulation build the simulated codelets' rates first: those of the
 * machine file at machine_path (NULL: SDP_SIM_MACHINE's, else the model's defaults) for ngpus
 * GPUs.  @return 0 or the runtime's error */
int sdp_cli_tasks_init(const char *machine_path, int ngpus);

#endif
