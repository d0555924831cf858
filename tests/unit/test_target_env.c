// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * target__read_env on real processes: the rank, local rank, world size and job that event
 * lines carry, from torch's variables, else Open MPI's, PMI's or Slurm's (ranks mpirun or
 * srun start directly), torch's first when both are there.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "resolve/target.h"

/* Whether pid runs sleep yet (its exec done: /proc shows the new environment). */
static int is_sleep(pid_t pid)
{
	char path[64], comm[16] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = 0;
	fclose(f);
	return !strncmp(comm, "sleep", 5);
}

/* The target fields of /bin/sleep run with exactly this environment. */
static void read_env_of(char *const env[], struct target *t)
{
	char *argv[] = {"sleep", "30", NULL};
	pid_t pid = fork();
	int i;

	if (pid == 0) {
		execve("/bin/sleep", argv, env);
		_exit(127);
	}
	for (i = 0; i < 500 && !is_sleep(pid); i++)
		usleep(10000);
	memset(t, 0, sizeof(*t));
	t->pid = pid;
	target__read_env(t);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static void test_torch_vars(void **state)
{
	char *env[] = {"PATH=/bin",
		       "RANK=3",
		       "LOCAL_RANK=1",
		       "WORLD_SIZE=8",
		       "TORCHELASTIC_RUN_ID=run-7",
		       "SLURM_JOB_ID=99",
		       NULL};
	struct target t;

	(void)state;
	read_env_of(env, &t);
	assert_int_equal(t.rank, 3);
	assert_int_equal(t.local_rank, 1);
	assert_int_equal(t.world_size, 8);
	assert_string_equal(t.job, "run-7");
}

static void test_mpi_vars(void **state)
{
	char *env[] = {"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_LOCAL_RANK=2",
		       "OMPI_COMM_WORLD_SIZE=16", NULL};
	char *pmi[] = {"PMI_RANK=4", "PMI_SIZE=6", "MPI_LOCALRANKID=0", NULL};
	struct target t;

	(void)state;
	read_env_of(env, &t);
	assert_int_equal(t.rank, 5);
	assert_int_equal(t.local_rank, 2);
	assert_int_equal(t.world_size, 16);
	assert_string_equal(t.job, "");
	read_env_of(pmi, &t);
	assert_int_equal(t.rank, 4);
	assert_int_equal(t.local_rank, 0);
	assert_int_equal(t.world_size, 6);
}

/* srun's task ids; an agent under srun that sets RANK for its workers: RANK wins, in any order. */
static void test_slurm_and_order(void **state)
{
	char *env[] = {"SLURM_PROCID=7", "SLURM_LOCALID=3", "SLURM_NTASKS=12", "SLURM_JOB_ID=42",
		       NULL};
	char *both[] = {
		"SLURM_PROCID=0", "RANK=9", "SLURM_LOCALID=0", "SLURM_NTASKS=1", "WORLD_SIZE=10",
		"LOCAL_RANK=1",	  NULL};
	struct target t;

	(void)state;
	read_env_of(env, &t);
	assert_int_equal(t.rank, 7);
	assert_int_equal(t.local_rank, 3);
	assert_int_equal(t.world_size, 12);
	assert_string_equal(t.job, "42");
	read_env_of(both, &t);
	assert_int_equal(t.rank, 9);
	assert_int_equal(t.local_rank, 1);
	assert_int_equal(t.world_size, 10);
}

static void test_bad_values(void **state)
{
	char *env[] = {"RANK=x", "OMPI_COMM_WORLD_RANK=2", "WORLD_SIZE=-1", "LOCAL_RANK=1e3", NULL};
	struct target t;

	(void)state;
	read_env_of(env, &t);
	assert_int_equal(t.rank, -1); /* RANK is there and says nothing usable */
	assert_int_equal(t.world_size, -1);
	assert_int_equal(t.local_rank, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_torch_vars),
		cmocka_unit_test(test_mpi_vars),
		cmocka_unit_test(test_slurm_and_order),
		cmocka_unit_test(test_bad_values),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
