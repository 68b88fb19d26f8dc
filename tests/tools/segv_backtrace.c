/* Native backtrace on a crash of a test worker (issue #40).
 *
 * `make test` preloads this library (LD_PRELOAD) when a C compiler is available. Its
 * constructor installs a handler for SIGSEGV, SIGBUS and SIGABRT before Python's
 * faulthandler, which chains to it after printing the Python stacks: it prints the
 * crashing thread's id and name, its native backtrace (glibc backtrace(), symbols of the
 * shared objects), the process's memory-mapping count and thread count, then re-raises
 * the signal with the default action, so the worker dies exactly as it would have.
 * Python stacks alone showed only pytest's capture and an execnet thread when the
 * crash happened in a native (XLA or torch) thread.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <execinfo.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <dirent.h>
#include <sys/syscall.h>
static void count_file_lines(const char *path, const char *label) {
  int fd = open(path, O_RDONLY); if (fd < 0) return;
  char buf[65536]; long n, lines = 0;
  while ((n = read(fd, buf, sizeof buf)) > 0) for (long i = 0; i < n; i++) if (buf[i] == '\n') lines++;
  close(fd); dprintf(2, "[segv_bt] %s=%ld\n", label, lines);
}
static void handler(int sig, siginfo_t *si, void *uc) {
  dprintf(2, "[segv_bt] signal %d at addr %p in tid %ld pid %d\n", sig, si->si_addr, (long)syscall(SYS_gettid), getpid());
  char tname[32] = "?"; 
  char p[64]; snprintf(p, sizeof p, "/proc/self/task/%ld/comm", (long)syscall(SYS_gettid));
  int fd = open(p, O_RDONLY); if (fd >= 0) { int n = read(fd, tname, 31); if (n>0) tname[n-1]=0; close(fd);} 
  dprintf(2, "[segv_bt] thread name=%s\n", tname);
  void *bt[64]; int n = backtrace(bt, 64); backtrace_symbols_fd(bt, n, 2);
  count_file_lines("/proc/self/maps", "mappings");
  DIR *d = opendir("/proc/self/task"); int th = 0; struct dirent *e;
  if (d) { while ((e = readdir(d))) if (e->d_name[0] != '.') th++; closedir(d); }
  dprintf(2, "[segv_bt] threads=%d\n", th);
  signal(sig, SIG_DFL); raise(sig);
}
__attribute__((constructor)) static void init(void) {
  static char stack[1<<16]; stack_t ss = { .ss_sp = stack, .ss_size = sizeof stack }; sigaltstack(&ss, 0);
  struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_sigaction = handler; sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, 0); sigaction(SIGBUS, &sa, 0); sigaction(SIGABRT, &sa, 0);
}
