/*
 * Simulated NVMe controllers below the unmodified nvme-cli, loaded with LD_PRELOAD.
 *
 * With NVME_SIM_STATE=<state dir> in the environment, file descriptors that name a
 * simulated controller node (<dev_root>/nvmeN) or a namespace backing file
 * (<state>/nvmeN/nsM.img, the target of the <dev_root>/nvmeNnM symlinks) are answered
 * here: ioctl() executes NVMe passthrough and block-device requests against the
 * controller state in <state>/nvmeN/, and fstat()/stat() report the nodes the way the
 * kernel would (character device for a controller, block device for a namespace).
 * Every other descriptor, and every process without NVME_SIM_STATE, goes to libc
 * untouched.
 *
 * The hardware state lives in files, not in a process, because nvme-cli runs as one
 * short process per command: <state>/nvmeN/config (written by controller.py, read
 * here), <state>/nvmeN/state (read and written by both under flock on
 * <state>/nvmeN/lock), commands.log (one line per command received). A sanitize runs in
 * a detached eraser process forked from the nvme-cli process that started it; it holds
 * flock on eraser.lock for its lifetime, so any later command that finds a sanitize in
 * progress with nobody holding that lock resumes it, as a drive resumes after a power
 * loss. Capacity no namespace holds is <state>/nvmeN/free.img: deleted namespaces'
 * bytes go to its front, new namespaces are cut from its front (old contents included),
 * and a sanitize erases it with the namespaces. A controller that is not bound to the
 * nvme driver (state presence=unbound|unplugged) answers nothing: ENODEV, and no nodes
 * are rendered for it. README.md describes the formats.
 *
 * Built with -DNVME_SIM_TOOL the same source is the nvme-sim command that controller.py
 * runs to render namespace nodes and to resume erasers, so no logic is duplicated.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <nvme/types.h>
#include <nvme/ioctl.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the simulator fills NVMe little-endian structures in host order"
#endif

#define MAX_NS 128          /* highest nsid a simulated controller supports */
#define MAX_INJ 32
#define MAX_EXTRA 32
#define NS_ALL 0xffffffffu
#define CTRL_MAJOR 241
#define DISK_MAJOR 259
#define TICK_MS 20          /* how often an eraser publishes SPROG */

/* NVMe status values as the kernel hands them to user space (SCT << 8 | SC, DNR 0x4000). */
#define DNR 0x4000
#define SC_INVALID_OPCODE (DNR | 0x01)
#define SC_INVALID_FIELD (DNR | 0x02)
#define SC_INVALID_NS (DNR | 0x0b)
#define SC_SANITIZE_FAILED 0x1c
#define SC_SANITIZE_IN_PROGRESS 0x1d
/* NVM Command Set 1.0 Figure "Status Code - Generic Command Status Values": 84h */
#define SC_FORMAT_IN_PROGRESS 0x84
#define SC_LBA_RANGE (DNR | 0x80)
#define SC_INVALID_LOG_PAGE (DNR | 0x109)
#define SC_INVALID_FORMAT (DNR | 0x10a)
#define SC_NS_INSUFFICIENT_CAP (DNR | 0x115)
#define SC_NS_ID_UNAVAILABLE (DNR | 0x116)
#define SC_NS_ALREADY_ATTACHED (DNR | 0x118)
#define SC_NS_NOT_ATTACHED (DNR | 0x119)
#define SC_CTRL_LIST_INVALID (DNR | 0x11c)
#define MPSMIN 4096u        /* CAP.MPSMIN: MDTS and WZSL count in these */
#define LOG_EFFECTS 0x05

static const unsigned LBADS[] = {9, 12};      /* LBA formats 0 and 1: 512 B and 4 KiB */
#define NLBAF 2

/* ------------------------------------------------------------------ libc */

static int (*real_ioctl)(int, unsigned long, ...);
static int (*real_fstat)(int, struct stat *);
static int (*real_fstat64)(int, struct stat64 *);
static int (*real_stat)(const char *, struct stat *);
static int (*real_stat64)(const char *, struct stat64 *);
static int (*real_fstatat)(int, const char *, struct stat *, int);
static int (*real_fstatat64)(int, const char *, struct stat64 *, int);
static int (*real_statx)(int, const char *, int, unsigned, struct statx *);

static void bind_libc(void)
{
	if (real_ioctl)
		return;
	real_fstat = dlsym(RTLD_NEXT, "fstat");
	real_fstat64 = dlsym(RTLD_NEXT, "fstat64");
	real_stat = dlsym(RTLD_NEXT, "stat");
	real_stat64 = dlsym(RTLD_NEXT, "stat64");
	real_fstatat = dlsym(RTLD_NEXT, "fstatat");
	real_fstatat64 = dlsym(RTLD_NEXT, "fstatat64");
	real_statx = dlsym(RTLD_NEXT, "statx");
	real_ioctl = dlsym(RTLD_NEXT, "ioctl");
}

/* ------------------------------------------------------------ simulation */

static struct {
	int active;
	char state[PATH_MAX];       /* realpath of NVME_SIM_STATE */
	char dev_root[PATH_MAX];    /* realpath of the simulated /dev */
	char sysfs_root[PATH_MAX];
} sim;

/* WCTEMP / CCTEMP that Identify Controller reports (Kelvin, bytes 267:266 and
 * 269:268): the composite temperature at or above WCTEMP sets Critical Warning
 * bit 1 (NVMe Base 2.0 Figure 207, byte 0 bit 1). */
#define SIM_WCTEMP 343
#define SIM_CCTEMP 353

struct conf {
	char name[32];
	unsigned index, vid, ssvid, cntlid, max_ns;
	char serial[21], model[41], firmware[9], sysfs_rel[PATH_MAX];
	uint64_t capacity;
	int ces, bes, wzs, ns_mgmt, fmt, estimates, auto_rescan;
	int remap_freed;        /* a new namespace maps the freed blocks it takes */
	int lie_sanitize, lie_wz, lie_format;   /* report success, erase nothing */
	uint32_t sanicap_extra;
	long sanitize_ms;
	long format_ms;         /* how long a Format NVM with SES 1/2 takes (0: at once) */
	/* Identify fields a preset sets as a real model reports them (controller.py) */
	unsigned ver, lpa, mdts, wzsl, dlfeat;
	int fna;                /* -1: derived (bit 2 = ces), else the FNA byte */
	int dsm, vrfy;          /* ONCS bit 2 (Dataset Management), bit 7 (Verify) */
};

struct ns {
	uint64_t nsze;          /* 0: not allocated */
	unsigned flbas;
	int attached;
};

struct inj {
	char queue[8];          /* any, admin, io */
	unsigned opcode, status;
	long times;             /* -1: every matching command */
	long skip;              /* matching commands to let through first */
};

struct state {
	struct ns ns[MAX_NS + 1];
	unsigned sstat, sprog, critical_warning, gen;
	int gde, fail_next, hang_next, lie_next;
	uint32_t scdw10;
	char mode[8];           /* "", run, fail, hang, lie */
	char failure[16];       /* "", restricted, unrestricted */
	char presence[16];      /* "" (bound to nvme), unbound, unplugged */
	uint64_t done, total;
	long long start_ms;
	long eraser_pid;
	long long fmt_until;    /* a Format NVM runs until then (ms), on fmt_nsid */
	uint32_t fmt_nsid;      /* NS_ALL: every namespace */
	int ninj;
	struct inj inj[MAX_INJ];
	int nextra;
	char extra[MAX_EXTRA][256];   /* keys this version does not know, kept verbatim */
};

struct ctx {
	char dir[PATH_MAX];     /* <state>/<name> */
	int lockfd;
	struct conf cf;
	struct state st;
};

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static int exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static void read_sim_conf(void)
{
	char path[PATH_MAX], line[PATH_MAX + 32];
	const char *dir;
	FILE *f;

	dir = getenv("NVME_SIM_STATE");
	if (!dir || !*dir || !realpath(dir, sim.state))
		return;
	snprintf(path, sizeof(path), "%s/sim.conf", sim.state);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "dev_root=", 9))
			snprintf(sim.dev_root, sizeof(sim.dev_root), "%s", line + 9);
		else if (!strncmp(line, "sysfs_root=", 11))
			snprintf(sim.sysfs_root, sizeof(sim.sysfs_root), "%s", line + 11);
	}
	fclose(f);
	sim.active = sim.dev_root[0] && sim.sysfs_root[0];
}

static void load_sim(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, read_sim_conf);
}

/* ------------------------------------------------------------ key=value */

static int read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n, total = 0;

	if (fd < 0)
		return -1;
	while ((n = read(fd, buf + total, size - 1 - total)) > 0)
		total += n;
	close(fd);
	buf[total] = 0;
	return n < 0 ? -1 : 0;
}

typedef void (*kv_fn)(void *obj, const char *key, const char *value, const char *line);

static int kv_load(const char *path, kv_fn fn, void *obj)
{
	char buf[1 << 16], *line, *save = NULL, *eq;

	if (read_file(path, buf, sizeof(buf)) < 0)
		return -1;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char key[64];

		eq = strchr(line, '=');
		if (!eq || eq - line >= (long)sizeof(key))
			continue;
		memcpy(key, line, eq - line);
		key[eq - line] = 0;
		fn(obj, key, eq + 1, line);
	}
	return 0;
}

static unsigned long long num(const char *v)
{
	return strtoull(v, NULL, 0);
}

static void conf_kv(void *obj, const char *k, const char *v, const char *line)
{
	struct conf *c = obj;
	(void)line;

#define STR(field) if (!strcmp(k, #field)) snprintf(c->field, sizeof(c->field), "%s", v)
#define NUM(field) if (!strcmp(k, #field)) c->field = num(v)
	STR(name); STR(serial); STR(model); STR(firmware); STR(sysfs_rel);
	NUM(index); NUM(vid); NUM(ssvid); NUM(cntlid); NUM(max_ns); NUM(capacity);
	NUM(ces); NUM(bes); NUM(wzs); NUM(ns_mgmt); NUM(fmt); NUM(estimates);
	NUM(auto_rescan); NUM(sanicap_extra); NUM(sanitize_ms); NUM(remap_freed);
	NUM(lie_sanitize); NUM(lie_wz); NUM(lie_format); NUM(format_ms);
	NUM(ver); NUM(lpa); NUM(mdts); NUM(wzsl); NUM(dlfeat); NUM(dsm); NUM(vrfy);
	if (!strcmp(k, "fna"))
		c->fna = (int)strtol(v, NULL, 0);
#undef STR
#undef NUM
}

static void state_kv(void *obj, const char *k, const char *v, const char *line)
{
	struct state *s = obj;

	if (!strncmp(k, "ns.", 3)) {
		unsigned id = num(k + 3);
		unsigned long long nsze;
		unsigned flbas;
		int attached;

		if (id >= 1 && id <= MAX_NS && sscanf(v, "%llu %u %d", &nsze, &flbas, &attached) == 3) {
			s->ns[id].nsze = nsze;
			s->ns[id].flbas = flbas;
			s->ns[id].attached = attached;
		}
		return;
	}
	if (!strncmp(k, "inject.", 7)) {
		struct inj *i = &s->inj[s->ninj];

		if (s->ninj < MAX_INJ && sscanf(v, "%7s %x %x %ld %ld", i->queue, &i->opcode,
						&i->status, &i->times, &i->skip) == 5)
			s->ninj++;
		return;
	}
#define STR(field) \
	if (!strcmp(k, #field)) { snprintf(s->field, sizeof(s->field), "%s", v); return; }
#define NUM(field) if (!strcmp(k, #field)) { s->field = strtoll(v, NULL, 0); return; }
	STR(mode); STR(failure); STR(presence);
	NUM(lie_next);
	NUM(sstat); NUM(sprog); NUM(critical_warning); NUM(gen); NUM(gde); NUM(fail_next);
	NUM(hang_next); NUM(scdw10); NUM(done); NUM(total); NUM(start_ms); NUM(eraser_pid);
	NUM(fmt_until); NUM(fmt_nsid);
#undef STR
#undef NUM
	if (s->nextra < MAX_EXTRA)
		snprintf(s->extra[s->nextra++], sizeof(s->extra[0]), "%s", line);
}

static int state_save(struct ctx *c)
{
	char tmp[PATH_MAX + 32], path[PATH_MAX + 16];
	struct state *s = &c->st;
	FILE *f;
	int i;

	snprintf(tmp, sizeof(tmp), "%s/state.tmp.%d", c->dir, getpid());
	snprintf(path, sizeof(path), "%s/state", c->dir);
	f = fopen(tmp, "we");
	if (!f)
		return -1;
	fprintf(f, "sstat=%u\nsprog=%u\nscdw10=0x%x\ngde=%d\nmode=%s\nfailure=%s\n"
		"fail_next=%d\nhang_next=%d\ngen=%u\ndone=%llu\ntotal=%llu\nstart_ms=%lld\n"
		"eraser_pid=%ld\ncritical_warning=%u\nlie_next=%d\npresence=%s\n"
		"fmt_until=%lld\nfmt_nsid=0x%x\n",
		s->sstat, s->sprog, s->scdw10, s->gde, s->mode, s->failure, s->fail_next,
		s->hang_next, s->gen, (unsigned long long)s->done, (unsigned long long)s->total,
		s->start_ms, s->eraser_pid, s->critical_warning, s->lie_next, s->presence,
		s->fmt_until, s->fmt_nsid);
	for (i = 1; i <= MAX_NS; i++)
		if (s->ns[i].nsze)
			fprintf(f, "ns.%d=%llu %u %d\n", i, (unsigned long long)s->ns[i].nsze,
				s->ns[i].flbas, s->ns[i].attached);
	for (i = 0; i < s->ninj; i++)
		fprintf(f, "inject.%d=%s 0x%x 0x%x %ld %ld\n", i, s->inj[i].queue,
			s->inj[i].opcode, s->inj[i].status, s->inj[i].times, s->inj[i].skip);
	for (i = 0; i < s->nextra; i++)
		fprintf(f, "%s\n", s->extra[i]);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* Lock the controller and load its config and state. */
static int ctx_open(struct ctx *c, const char *name)
{
	char path[PATH_MAX + 16];

	memset(c, 0, sizeof(*c));
	snprintf(c->dir, sizeof(c->dir), "%s/%s", sim.state, name);
	snprintf(path, sizeof(path), "%s/lock", c->dir);
	c->lockfd = open(path, O_RDWR | O_CLOEXEC);
	if (c->lockfd < 0)
		return -1;
	while (flock(c->lockfd, LOCK_EX) < 0)
		if (errno != EINTR)
			goto fail;
	snprintf(path, sizeof(path), "%s/config", c->dir);
	c->cf.remap_freed = 1;
	/* what a controller written before these knobs existed reports */
	c->cf.ver = 0x20000;
	c->cf.lpa = 0x2;
	c->cf.mdts = 5;
	c->cf.dlfeat = 0x9;
	c->cf.fna = -1;
	c->cf.dsm = 1;
	if (kv_load(path, conf_kv, &c->cf) < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/state", c->dir);
	c->st.hang_next = -1;
	if (kv_load(path, state_kv, &c->st) < 0)
		goto fail;
	if (c->cf.max_ns > MAX_NS)
		c->cf.max_ns = MAX_NS;
	return 0;
fail:
	close(c->lockfd);
	c->lockfd = -1;
	return -1;
}

static void ctx_close(struct ctx *c)
{
	if (c->lockfd >= 0) {
		flock(c->lockfd, LOCK_UN);
		close(c->lockfd);
		c->lockfd = -1;
	}
}

/* ------------------------------------------------------------ geometry */

static unsigned ns_bs(const struct ns *n)
{
	return 1u << LBADS[n->flbas & 0xf];
}

static uint64_t ns_bytes(const struct ns *n)
{
	return n->nsze * ns_bs(n);
}

static uint64_t allocated(const struct state *s)
{
	uint64_t sum = 0;
	int i;

	for (i = 1; i <= MAX_NS; i++)
		sum += ns_bytes(&s->ns[i]);
	return sum;
}

static int attached_count(const struct state *s)
{
	int i, n = 0;

	for (i = 1; i <= MAX_NS; i++)
		n += s->ns[i].nsze && s->ns[i].attached;
	return n;
}

static void backing_path(const struct ctx *c, unsigned nsid, char *out, size_t size)
{
	snprintf(out, size, "%s/ns%u.img", c->dir, nsid);
}

static int sanitizing(const struct state *s)
{
	return s->mode[0] != 0;
}

/*
 * What Identify Controller advertises. Every optional command, log page and CNS value
 * below is refused unless these say the controller has it (NVMe Base Specification 2.0).
 */
static uint32_t sanicap(const struct conf *cf)
{
	return (cf->ces ? 1 : 0) | (cf->bes ? 2 : 0) | cf->sanicap_extra;
}

/* SANICAP bits 2:0 all clear: the Sanitize command is not supported (§5.24). */
static int sanitize_supported(const struct conf *cf)
{
	return (sanicap(cf) & 7) != 0;
}

static unsigned fna(const struct conf *cf)
{
	return cf->fna >= 0 ? (unsigned)cf->fna : (cf->ces ? 1u << 2 : 0);
}

static int ver_at_least(const struct conf *cf, unsigned major, unsigned minor)
{
	return cf->ver >= (major << 16 | minor << 8);
}

static uint16_t oacs(const struct conf *cf)
{
	return (cf->fmt ? 1 << 1 : 0) | (cf->ns_mgmt ? 1 << 3 : 0);
}

static uint16_t oncs(const struct conf *cf)
{
	return (cf->dsm ? 1 << 2 : 0) | (cf->wzs ? 1 << 3 : 0) | (cf->vrfy ? 1 << 7 : 0);
}

/* Bound to the nvme driver: the host has nodes and can send commands. */
static int bound(const struct state *s)
{
	return s->presence[0] == 0;
}

/* ---------------------------------------------------- sysfs and /dev nodes */

static int mkdir_p(const char *path)
{
	char tmp[PATH_MAX], *p;

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(tmp, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static void attr(const char *dir, const char *name, const char *fmt, ...)
{
	char path[PATH_MAX + 64];
	va_list ap;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "we");
	if (!f)
		return;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
}

static void relink(const char *target, const char *link)
{
	unlink(link);
	if (symlink(target, link) < 0 && errno != EEXIST)
		fprintf(stderr, "nvme-sim: symlink %s: %s\n", link, strerror(errno));
}

static uint64_t ns_eui64(const struct ctx *c, unsigned nsid)
{
	uint64_t h = 1469598103934665603ULL;   /* FNV-1a of the serial, then the nsid */
	const char *p;

	for (p = c->cf.serial; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	return (h & ~0xffffULL) | (nsid & 0xffff);
}

static void disk_name(const struct ctx *c, unsigned nsid, char *out, size_t size)
{
	snprintf(out, size, "%sn%u", c->cf.name, nsid);
}

static void node_add(const struct ctx *c, unsigned nsid)
{
	char disk[48], dir[PATH_MAX], q[PATH_MAX + 8], link[PATH_MAX + 64],
		target[PATH_MAX + 64], backing[PATH_MAX];
	const struct ns *n = &c->st.ns[nsid];
	uint64_t eui = ns_eui64(c, nsid);

	disk_name(c, nsid, disk, sizeof(disk));
	snprintf(dir, sizeof(dir), "%s/%s/%s", sim.sysfs_root, c->cf.sysfs_rel, disk);
	snprintf(q, sizeof(q), "%s/holders", dir);
	mkdir_p(q);
	snprintf(q, sizeof(q), "%s/slaves", dir);
	mkdir_p(q);
	snprintf(q, sizeof(q), "%s/queue", dir);
	if (mkdir_p(q) < 0)
		return;
	attr(dir, "nsid", "%u\n", nsid);
	attr(dir, "size", "%llu\n", (unsigned long long)(ns_bytes(n) / 512));
	attr(dir, "dev", "%u:%u\n", DISK_MAJOR, c->cf.index * 256 + nsid);
	attr(dir, "wwid", "eui.%016llx\n", (unsigned long long)eui);
	attr(dir, "eui", "%016llx\n", (unsigned long long)eui);
	attr(dir, "ro", "0\n");
	attr(dir, "removable", "0\n");
	attr(dir, "hidden", "0\n");
	attr(q, "logical_block_size", "%u\n", ns_bs(n));
	attr(q, "physical_block_size", "%u\n", ns_bs(n));
	attr(q, "hw_sector_size", "%u\n", ns_bs(n));
	attr(q, "minimum_io_size", "%u\n", ns_bs(n));
	snprintf(link, sizeof(link), "%s/device", dir);
	snprintf(target, sizeof(target), "../../%s", c->cf.name);
	relink(target, link);
	snprintf(q, sizeof(q), "%s/class/block", sim.sysfs_root);
	mkdir_p(q);
	snprintf(link, sizeof(link), "%s/%s", q, disk);
	snprintf(target, sizeof(target), "../../%s/%s", c->cf.sysfs_rel, disk);
	relink(target, link);
	snprintf(q, sizeof(q), "%s/block", sim.sysfs_root);
	mkdir_p(q);
	snprintf(link, sizeof(link), "%s/%s", q, disk);
	snprintf(target, sizeof(target), "../%s/%s", c->cf.sysfs_rel, disk);
	relink(target, link);
	backing_path(c, nsid, backing, sizeof(backing));
	snprintf(link, sizeof(link), "%s/%s", sim.dev_root, disk);
	relink(backing, link);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void node_remove(const struct ctx *c, unsigned nsid)
{
	char disk[48], path[PATH_MAX + 64];

	disk_name(c, nsid, disk, sizeof(disk));
	snprintf(path, sizeof(path), "%s/%s", sim.dev_root, disk);
	unlink(path);
	snprintf(path, sizeof(path), "%s/class/block/%s", sim.sysfs_root, disk);
	unlink(path);
	snprintf(path, sizeof(path), "%s/block/%s", sim.sysfs_root, disk);
	unlink(path);
	snprintf(path, sizeof(path), "%s/%s/%s", sim.sysfs_root, c->cf.sysfs_rel, disk);
	nftw(path, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* What the kernel does on a namespace rescan: one node per attached namespace (none
 * while the controller is not bound to the nvme driver). */
static void rescan(const struct ctx *c)
{
	char disk[48], path[PATH_MAX + 64];
	struct stat sb;
	unsigned nsid;

	for (nsid = 1; nsid <= MAX_NS; nsid++) {
		const struct ns *n = &c->st.ns[nsid];

		disk_name(c, nsid, disk, sizeof(disk));
		snprintf(path, sizeof(path), "%s/%s", sim.dev_root, disk);
		if (n->nsze && n->attached && bound(&c->st))
			node_add(c, nsid);
		else if (lstat(path, &sb) == 0)
			node_remove(c, nsid);
	}
}

static void namespaces_changed(const struct ctx *c)
{
	if (c->cf.auto_rescan)
		rescan(c);
}

/* ------------------------------------------------------------ data */

static uint64_t rng[4];
static int rng_seeded;

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256**: crypto-erased media only has to read as noise, and fast */
static uint64_t rng_next(void)
{
	uint64_t r, t;

	if (!rng_seeded) {
		if (getrandom(rng, sizeof(rng), 0) != sizeof(rng) || !(rng[0] | rng[1] | rng[2] | rng[3])) {
			rng[0] = (uint64_t)now_ms() ^ ((uint64_t)getpid() << 32);
			rng[1] = 0x9e3779b97f4a7c15ULL;
		}
		rng_seeded = 1;
	}
	r = rotl(rng[1] * 5, 7) * 9;
	t = rng[1] << 17;
	rng[2] ^= rng[0]; rng[3] ^= rng[1]; rng[1] ^= rng[2]; rng[0] ^= rng[3];
	rng[2] ^= t; rng[3] = rotl(rng[3], 45);
	return r;
}

enum fill { FILL_ZERO, FILL_RANDOM };

/* Overwrite [off, off+len) of a backing file: zeroes (a hole) or random bytes. */
static int fill_range(const char *path, uint64_t off, uint64_t len, enum fill how)
{
	const size_t size = 1 << 20;
	int fd = open(path, O_WRONLY | O_CLOEXEC), rc = 0;
	uint64_t *buf = NULL;

	if (fd < 0)
		return -1;
	/* a hole reads back as zeroes and costs nothing: what a block erase looks like */
	if (how == FILL_ZERO && len &&
	    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) == 0)
		goto out;
	buf = calloc(1, size);
	if (!buf)
		rc = -1;
	while (len && rc == 0) {
		size_t n = len < size ? len : size, i;

		if (how == FILL_RANDOM)
			for (i = 0; i < (n + 7) / 8; i++)
				buf[i] = rng_next();
		if (pwrite(fd, buf, n, off) != (ssize_t)n)
			rc = -1;
		off += n;
		len -= n;
	}
out:
	free(buf);
	close(fd);
	return rc;
}

static int fill_ns(const struct ctx *c, unsigned nsid, enum fill how)
{
	char path[PATH_MAX];

	backing_path(c, nsid, path, sizeof(path));
	return fill_range(path, 0, ns_bytes(&c->st.ns[nsid]), how);
}


/* ------------------------------------------------------------ free media */

/*
 * Capacity not allocated to a namespace lives in <state>/nvmeN/free.img, always
 * capacity - allocated bytes. Deleting a namespace puts its blocks at the front of it
 * (most recently freed first); creating one takes the first bytes of it, with their
 * old contents unless remap_freed is off. Zeroes are holes: nothing here writes them.
 */
static void free_path(const struct ctx *c, char *out, size_t size)
{
	snprintf(out, size, "%s/free.img", c->dir);
}

static int64_t fd_size(int fd)
{
	return lseek(fd, 0, SEEK_END);
}

/* The free media, opened read-write; created as zeroes if it is missing. */
static int free_open(const struct ctx *c)
{
	char path[PATH_MAX];
	uint64_t used = allocated(&c->st);
	int fd;

	free_path(c, path, sizeof(path));
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (fd >= 0 && ftruncate(fd, c->cf.capacity > used ? c->cf.capacity - used : 0) < 0) {
			close(fd);
			fd = -1;
		}
	}
	return fd;
}

static uint64_t free_size(const struct ctx *c)
{
	int fd = free_open(c);
	int64_t size;

	if (fd < 0)
		return 0;
	size = fd_size(fd);
	close(fd);
	return size > 0 ? (uint64_t)size : 0;
}

/* Copy bytes; a source shorter than len leaves the rest of the destination as it is. */
static int copy_bytes(int src, uint64_t soff, int dst, uint64_t doff, uint64_t len)
{
	const size_t size = 1 << 20;
	char *buf = NULL;
	int rc = 0;

	while (len) {
		loff_t in = soff, out = doff;
		ssize_t n = copy_file_range(src, &in, dst, &out, len < (1u << 30) ? len : (1u << 30), 0);

		if (n <= 0)
			break;
		soff += n;
		doff += n;
		len -= n;
	}
	if (len && !(buf = malloc(size)))
		return -1;
	while (len) {
		ssize_t n = pread(src, buf, len < size ? len : size, soff);

		if (n < 0) {
			rc = -1;
			break;
		}
		if (n == 0)
			break;
		if (pwrite(dst, buf, n, doff) != n) {
			rc = -1;
			break;
		}
		soff += n;
		doff += n;
		len -= n;
	}
	free(buf);
	return rc;
}

/* Copy [soff, soff+len) of src to dst at doff, skipping src's holes: the destination
 * range must already read as zeroes (a hole, or a fresh extension of the file). */
static int copy_data(int src, uint64_t soff, int dst, uint64_t doff, uint64_t len)
{
	uint64_t end = soff + len, pos = soff;

	while (pos < end) {
		off_t d = lseek(src, pos, SEEK_DATA), h;

		if (d < 0) {
			if (errno == ENXIO)
				break;          /* only a hole up to EOF */
			d = pos;                /* no SEEK_DATA here: copy everything */
			h = end;
		} else {
			if ((uint64_t)d >= end)
				break;
			h = lseek(src, d, SEEK_HOLE);
			if (h < 0 || (uint64_t)h > end)
				h = end;
		}
		if (copy_bytes(src, d, dst, doff + (d - soff), h - d) < 0)
			return -1;
		pos = h;
	}
	return 0;
}

static int tmp_open(const struct ctx *c, char *path, size_t size, uint64_t length)
{
	int fd;

	snprintf(path, size, "%s/free.img.tmp.%d", c->dir, getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0 && ftruncate(fd, length) < 0) {
		close(fd);
		unlink(path);
		return -1;
	}
	return fd;
}

/* Put [off, off+len) of src at the front of the free media. */
static int free_prepend(const struct ctx *c, int src, uint64_t off, uint64_t len)
{
	char path[PATH_MAX], tmp[PATH_MAX + 32];
	int fd = free_open(c), t, rc;
	int64_t fsize;

	if (fd < 0)
		return -1;
	fsize = fd_size(fd);
	if (!len || fsize < 0) {
		close(fd);
		return fsize < 0 ? -1 : 0;
	}
	/* ext4 and xfs shift the extents: only the freed bytes are copied */
	if (fsize > 0 && fallocate(fd, FALLOC_FL_INSERT_RANGE, 0, len) == 0) {
		rc = copy_data(src, off, fd, 0, len);
		close(fd);
		return rc;
	}
	t = tmp_open(c, tmp, sizeof(tmp), len + fsize);
	if (t < 0) {
		close(fd);
		return -1;
	}
	rc = copy_data(src, off, t, 0, len) | copy_data(fd, 0, t, len, fsize);
	close(fd);
	close(t);
	free_path(c, path, sizeof(path));
	if (rc == 0 && rename(tmp, path) == 0)
		return 0;
	unlink(tmp);
	return -1;
}

/* Take the first len bytes of the free media for a new namespace file at dst_path:
 * their old contents when remap, zeroes otherwise. */
static int free_take(const struct ctx *c, const char *dst_path, uint64_t len, int remap)
{
	char path[PATH_MAX], tmp[PATH_MAX + 32];
	int fd = free_open(c), dst, t, rc = 0;
	int64_t fsize;
	uint64_t take;

	if (fd < 0)
		return -1;
	fsize = fd_size(fd);
	take = fsize < 0 ? 0 : (uint64_t)fsize < len ? (uint64_t)fsize : len;
	dst = open(dst_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (dst < 0 || ftruncate(dst, len) < 0 || (remap && copy_data(fd, 0, dst, 0, take) < 0)) {
		if (dst >= 0)
			close(dst);
		unlink(dst_path);
		close(fd);
		return -1;
	}
	close(dst);
	if (take == (uint64_t)fsize) {
		rc = ftruncate(fd, 0);
	} else if (take && fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 0, take) != 0) {
		t = tmp_open(c, tmp, sizeof(tmp), fsize - take);
		rc = t < 0 ? -1 : copy_data(fd, take, t, 0, fsize - take);
		if (t >= 0)
			close(t);
		free_path(c, path, sizeof(path));
		if (rc == 0)
			rc = rename(tmp, path);
		if (rc)
			unlink(tmp);
	}
	close(fd);
	return rc;
}

/* Free a namespace: its blocks go to the front of the free media. */
static int free_namespace(const struct ctx *c, unsigned nsid)
{
	char path[PATH_MAX];
	int fd, rc;

	backing_path(c, nsid, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	rc = free_prepend(c, fd, 0, ns_bytes(&c->st.ns[nsid]));
	close(fd);
	if (rc == 0)
		unlink(path);
	return rc;
}

/* ------------------------------------------------------------ sanitize */

#define SANACT(cdw10) ((cdw10) & 7)
#define AUSE(cdw10) (((cdw10) >> 3) & 1)

/* The subsystem's media in erase order: namespaces by nsid, then the free media. */
static uint64_t media_total(const struct ctx *c)
{
	return allocated(&c->st) + free_size(c);
}

static void erase_upto(const struct ctx *c, uint64_t from, uint64_t to, enum fill how)
{
	uint64_t base = 0;
	unsigned nsid;

	for (nsid = 1; nsid <= MAX_NS + 1 && from < to; nsid++) {
		uint64_t size = nsid <= MAX_NS ? ns_bytes(&c->st.ns[nsid]) : free_size(c), lo, hi;
		char path[PATH_MAX];

		if (!size)
			continue;
		lo = from > base ? from - base : 0;
		hi = to - base < size ? to - base : size;
		if (from < base + size && to > base && lo < hi) {
			if (nsid <= MAX_NS)
				backing_path(c, nsid, path, sizeof(path));
			else
				free_path(c, path, sizeof(path));
			fill_range(path, lo, hi - lo, how);
		}
		base += size;
	}
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int eraser_mode(const char *mode)
{
	return !strcmp(mode, "run") || !strcmp(mode, "fail") || !strcmp(mode, "lie");
}

/*
 * The body of a detached eraser: erase (or, for an injected failure or a lying drive,
 * only pretend to) at the pace sanitize_ms allows, publishing SPROG every tick, then
 * record the outcome.
 * It exits as soon as the state says the sanitize it serves is no longer running.
 */
static void eraser(const char *name, unsigned gen)
{
	struct ctx c;
	int first = 1;

	rng_seeded = 0;         /* not the parent's sequence */
	for (;;) {
		double ft, fw, f;
		uint64_t target;
		long long elapsed;
		enum fill how;
		int erase, ok;

		if (ctx_open(&c, name) < 0)
			_exit(1);
		if (c.st.gen != gen || !eraser_mode(c.st.mode)) {
			ctx_close(&c);
			_exit(0);
		}
		if (first)
			c.st.eraser_pid = getpid();
		first = 0;
		erase = !strcmp(c.st.mode, "run");
		ok = erase || !strcmp(c.st.mode, "lie");     /* a lie ends in success too */
		how = SANACT(c.st.scdw10) == 4 ? FILL_RANDOM : FILL_ZERO;
		elapsed = now_ms() - c.st.start_ms;
		ft = c.cf.sanitize_ms > 0 ? (double)elapsed / c.cf.sanitize_ms : 1.0;
		ft = ft < 0 ? 0 : ft > 1 ? 1 : ft;
		fw = !erase || !c.st.total ? 1.0 : (double)c.st.done / c.st.total;
		f = ft < fw ? ft : fw;
		if (f >= 1.0) {
			c.st.sstat = ok ? 1 : 3;
			c.st.gde = ok;
			c.st.sprog = 0xffff;
			c.st.mode[0] = 0;
			snprintf(c.st.failure, sizeof(c.st.failure), "%s",
				 ok ? "" : AUSE(c.st.scdw10) ? "unrestricted" : "restricted");
			c.st.eraser_pid = 0;
			state_save(&c);
			ctx_close(&c);
			_exit(0);
		}
		c.st.sprog = (unsigned)(f * 65536) > 65535 ? 65535 : (unsigned)(f * 65536);
		state_save(&c);
		ctx_close(&c);
		if (erase && c.st.done < c.st.total) {
			/* erase what the next tick's share of the time allows */
			double next = c.cf.sanitize_ms > 0 ?
				ft + (double)TICK_MS / c.cf.sanitize_ms : 1.0;

			target = next >= 1.0 ? c.st.total : (uint64_t)(c.st.total * next);
			if (target > c.st.done) {
				erase_upto(&c, c.st.done, target, how);
				if (ctx_open(&c, name) < 0)
					_exit(1);
				if (c.st.gen != gen) {
					ctx_close(&c);
					_exit(0);
				}
				c.st.done = target;
				state_save(&c);
				ctx_close(&c);
			}
		}
		sleep_ms(TICK_MS);
	}
}

static void close_all_but(int keep)
{
	int fd, max;

	if ((keep <= 3 || close_range(3, keep - 1, 0) == 0) && close_range(keep + 1, ~0U, 0) == 0)
		return;
	max = (int)sysconf(_SC_OPEN_MAX);
	if (max < 0 || max > 65536)
		max = 65536;
	for (fd = 3; fd < max; fd++)
		if (fd != keep)
			close(fd);
}

/*
 * Start (or resume) the eraser unless one is alive. The new eraser inherits the flock
 * taken here on eraser.lock and keeps it until it exits; it closes every other
 * descriptor so that nvme-cli's stdout pipe is not held open behind its back.
 */
static void ensure_eraser(struct ctx *c)
{
	char path[PATH_MAX + 16];
	unsigned gen;
	pid_t pid;
	int fd;

	if (!eraser_mode(c->st.mode))
		return;
	snprintf(path, sizeof(path), "%s/eraser.lock", c->dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return;
	}
	gen = ++c->st.gen;
	pid = fork();
	if (pid == 0) {
		if (fork() == 0) {
			int null = open("/dev/null", O_RDWR);

			setsid();
			if (null >= 0) {
				dup2(null, 0);
				dup2(null, 1);
				dup2(null, 2);
			}
			close_all_but(fd);
			eraser(c->cf.name, gen);
		}
		_exit(0);
	}
	close(fd);
	if (pid > 0)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
}

static int cmd_sanitize(struct ctx *c, const struct nvme_passthru_cmd64 *cmd)
{
	struct state *s = &c->st;
	unsigned act = SANACT(cmd->cdw10);

	/* Figure "Opcodes for Admin Commands": Sanitize is optional; a controller whose
	 * SANICAP reports no action does not implement it -> Invalid Command Opcode. */
	if (!sanitize_supported(&c->cf))
		return SC_INVALID_OPCODE;
	/* §5.24 Figure "Sanitize - Command Dword 10": bits 31:10 reserved, SANACT 0h and
	 * 5h..7h reserved -> Invalid Field in Command */
	if ((cmd->cdw10 & 0xfffffc00u) || act == 0 || act > 4)
		return SC_INVALID_FIELD;
	/* §5.24 / SANICAP NDI (bit 29): with No-Deallocate Inhibited and the default
	 * No-Deallocate Response Mode 0, NDAS=1 is aborted with Invalid Field in Command */
	if ((cmd->cdw10 & (1u << 9)) && (sanicap(&c->cf) & (1u << 29)) && act != 1)
		return SC_INVALID_FIELD;
	if (sanitizing(s))
		return SC_SANITIZE_IN_PROGRESS;
	if (act == 1) {
		if (!strcmp(s->failure, "restricted"))
			return SC_SANITIZE_FAILED;
		s->failure[0] = 0;
		return 0;
	}
	/* §5.24: an action SANICAP does not report -> Invalid Field in Command (overwrite
	 * is not simulated: refused like an unsupported action) */
	if (!((act == 2 && c->cf.bes) || (act == 4 && c->cf.ces)))
		return SC_INVALID_FIELD;
	s->scdw10 = cmd->cdw10;
	s->sstat = 2;
	s->failure[0] = 0;
	s->start_ms = now_ms();
	s->done = 0;
	s->total = media_total(c);      /* every namespace and the unallocated capacity */
	if (s->hang_next >= 0) {
		snprintf(s->mode, sizeof(s->mode), "hang");
		s->sprog = s->hang_next;
		s->hang_next = -1;
	} else {
		const char *mode = "run";

		if (s->fail_next) {
			mode = "fail";
			s->fail_next = 0;
		} else if (s->lie_next > 0 || c->cf.lie_sanitize) {
			mode = "lie";
			if (s->lie_next > 0)
				s->lie_next--;
		}
		snprintf(s->mode, sizeof(s->mode), "%s", mode);
		s->sprog = 0;
		ensure_eraser(c);
	}
	return 0;
}

/* ------------------------------------------------------------ admin */

static void pad(char *dst, const char *src, size_t n)
{
	size_t len = strlen(src);

	memset(dst, ' ', n);
	memcpy(dst, src, len < n ? len : n);
}

static void le128(uint8_t *dst, uint64_t v)
{
	memset(dst, 0, 16);
	memcpy(dst, &v, 8);
}

static void id_ctrl(const struct ctx *c, struct nvme_id_ctrl *id)
{
	const struct conf *cf = &c->cf;

	id->vid = cf->vid;
	id->ssvid = cf->ssvid;
	pad(id->sn, cf->serial, sizeof(id->sn));
	pad(id->mn, cf->model, sizeof(id->mn));
	pad(id->fr, cf->firmware, sizeof(id->fr));
	id->rab = 6;
	id->ieee[0] = 0xe4; id->ieee[1] = 0xd2; id->ieee[2] = 0x5c;
	id->mdts = cf->mdts;
	id->cntlid = cf->cntlid;
	id->ver = cf->ver;
	id->cntrltype = 1;
	id->oacs = oacs(cf);
	id->acl = 3;
	id->aerl = 3;
	id->frmw = 0x3;
	/* only what is simulated is advertised: LPA bits 0-2 (per-namespace SMART,
	 * Commands Supported and Effects, extended data); telemetry and the persistent
	 * event log a preset's model has are not served, so not claimed */
	id->lpa = cf->lpa & 0x7;
	id->elpe = 63;
	id->wctemp = SIM_WCTEMP;
	id->cctemp = SIM_CCTEMP;
	le128(id->tnvmcap, cf->capacity);
	le128(id->unvmcap, cf->ns_mgmt ? cf->capacity - allocated(&c->st) : 0);
	id->sanicap = sanicap(cf);
	id->sqes = 0x66;
	id->cqes = 0x44;
	id->nn = cf->max_ns;
	id->oncs = oncs(cf);
	id->fna = fna(cf);
	snprintf(id->subnqn, sizeof(id->subnqn), "nqn.2024-01.org.steward.nvme-sim:%s", cf->serial);
	id->psd[0].mp = 2500;
	id->psd[0].enlat = 16;
	id->psd[0].exlat = 4;
}

static void id_ns_common(const struct ctx *c, struct nvme_id_ns *id)
{
	unsigned i;

	id->nlbaf = NLBAF - 1;
	id->dlfeat = c->cf.dlfeat;
	for (i = 0; i < NLBAF; i++)
		id->lbaf[i].ds = LBADS[i];
}

static void id_ns(const struct ctx *c, unsigned nsid, struct nvme_id_ns *id)
{
	const struct ns *n = &c->st.ns[nsid];
	uint64_t eui = ns_eui64(c, nsid);
	int i;

	id_ns_common(c, id);
	id->nsze = id->ncap = id->nuse = n->nsze;
	id->flbas = n->flbas;
	le128(id->nvmcap, ns_bytes(n));
	for (i = 0; i < 8; i++)
		id->eui64[i] = id->nguid[8 + i] = eui >> (56 - 8 * i);
	memcpy(id->nguid, c->cf.serial, strlen(c->cf.serial) < 8 ? strlen(c->cf.serial) : 8);
}

static int ns_valid(const struct ctx *c, unsigned nsid)
{
	return nsid >= 1 && nsid <= c->cf.max_ns;
}

static int cmd_identify(struct ctx *c, const struct nvme_passthru_cmd64 *cmd, uint8_t *buf)
{
	unsigned cns = cmd->cdw10 & 0xff, csi = cmd->cdw11 >> 24, nsid = cmd->nsid, i, n = 0;
	const struct state *s = &c->st;

	/* §5.17.1 Figure "CNS Values": CNS 02h came with NVMe 1.1, 03h with 1.3, the
	 * I/O Command Set specific 05h/06h with 2.0; 10h..13h exist only with Namespace
	 * Management (OACS bit 3). A CNS value the controller does not support is
	 * aborted with Invalid Field in Command. */
	if ((cns == NVME_IDENTIFY_CNS_NS_ACTIVE_LIST && !ver_at_least(&c->cf, 1, 1)) ||
	    (cns == NVME_IDENTIFY_CNS_NS_DESC_LIST && !ver_at_least(&c->cf, 1, 3)) ||
	    ((cns == NVME_IDENTIFY_CNS_CSI_NS || cns == NVME_IDENTIFY_CNS_CSI_CTRL) &&
	     !ver_at_least(&c->cf, 2, 0)) ||
	    (cns >= NVME_IDENTIFY_CNS_ALLOCATED_NS_LIST && cns <= NVME_IDENTIFY_CNS_CTRL_LIST &&
	     !c->cf.ns_mgmt))
		return SC_INVALID_FIELD;
	switch (cns) {
	case NVME_IDENTIFY_CNS_NS:
	case NVME_IDENTIFY_CNS_ALLOCATED_NS:
		if (nsid == NS_ALL) {
			/* §5.17.2.1: NSID FFFFFFFFh (capabilities common to all namespaces)
			 * needs Namespace Management, else Invalid Namespace or Format */
			if (!c->cf.ns_mgmt)
				return SC_INVALID_NS;
			id_ns_common(c, (void *)buf);
			return 0;
		}
		if (!ns_valid(c, nsid))
			return SC_INVALID_NS;
		if (s->ns[nsid].nsze && (s->ns[nsid].attached || cns == NVME_IDENTIFY_CNS_ALLOCATED_NS))
			id_ns(c, nsid, (void *)buf);
		return 0;       /* an inactive nsid reads as zeroes */
	case NVME_IDENTIFY_CNS_CTRL:
		id_ctrl(c, (void *)buf);
		return 0;
	case NVME_IDENTIFY_CNS_NS_ACTIVE_LIST:
	case NVME_IDENTIFY_CNS_ALLOCATED_NS_LIST:
		if (nsid >= 0xfffffffe)
			return SC_INVALID_NS;
		for (i = nsid + 1; i <= MAX_NS && n < 1024; i++)
			if (s->ns[i].nsze && (s->ns[i].attached || cns == NVME_IDENTIFY_CNS_ALLOCATED_NS_LIST))
				((uint32_t *)buf)[n++] = i;
		return 0;
	case NVME_IDENTIFY_CNS_NS_DESC_LIST:
		if (!ns_valid(c, nsid) || !s->ns[nsid].nsze || !s->ns[nsid].attached)
			return SC_INVALID_NS;
		{
			struct nvme_id_ns id = {0};

			id_ns(c, nsid, &id);
			buf[0] = NVME_NIDT_EUI64; buf[1] = 8; memcpy(buf + 4, id.eui64, 8);
			buf[12] = NVME_NIDT_NGUID; buf[13] = 16; memcpy(buf + 16, id.nguid, 16);
		}
		return 0;
	case NVME_IDENTIFY_CNS_CSI_NS:
		return csi == NVME_CSI_NVM ? 0 : SC_INVALID_FIELD;
	case NVME_IDENTIFY_CNS_CSI_CTRL:
		if (csi != NVME_CSI_NVM)
			return SC_INVALID_FIELD;
		/* NVM Command Set spec §4.1.5.1: WZSL, 2^n units of CAP.MPSMIN, 0 = no limit */
		((struct nvme_id_ctrl_nvm *)buf)->wzsl = c->cf.wzsl;
		return 0;
	case NVME_IDENTIFY_CNS_NS_CTRL_LIST:
		if (ns_valid(c, nsid) && s->ns[nsid].nsze && s->ns[nsid].attached &&
		    c->cf.cntlid >= (cmd->cdw10 >> 16)) {
			((uint16_t *)buf)[0] = 1;
			((uint16_t *)buf)[1] = c->cf.cntlid;
		}
		return 0;
	case NVME_IDENTIFY_CNS_CTRL_LIST:
		if (c->cf.cntlid >= (cmd->cdw10 >> 16)) {
			((uint16_t *)buf)[0] = 1;
			((uint16_t *)buf)[1] = c->cf.cntlid;
		}
		return 0;
	default:
		return SC_INVALID_FIELD;
	}
}

/* The SMART / Health Information the test gives a controller (controller.py
 * set_health(), file <state>/nvmeN/health): what the drive's firmware measures.
 * Absent keys keep a new, healthy drive's values. */
struct health {
	unsigned temp_k, avail_spare, spare_thresh, percent_used, extra_warning;
	unsigned long long media_errors, err_log_entries;
	unsigned warning_temp_min, critical_temp_min;
	int lie;                /* report a healthy drive whatever the media's state */
};

static void health_kv(void *obj, const char *k, const char *v, const char *line)
{
	struct health *h = obj;

	(void)line;
#define NUM(field) if (!strcmp(k, #field)) { h->field = strtoull(v, NULL, 0); return; }
	NUM(temp_k); NUM(avail_spare); NUM(spare_thresh); NUM(percent_used);
	NUM(extra_warning); NUM(media_errors); NUM(err_log_entries);
	NUM(warning_temp_min); NUM(critical_temp_min); NUM(lie);
#undef NUM
}

static void smart_fill(struct ctx *c, struct nvme_smart_log *l)
{
	char path[PATH_MAX + 16];
	struct health h = {.temp_k = 310, .avail_spare = 100, .spare_thresh = 10};
	unsigned cw;

	snprintf(path, sizeof(path), "%s/health", c->dir);
	kv_load(path, health_kv, &h);       /* a missing file: a healthy drive */
	if (h.lie) {
		/* A lying firmware: every field of a new drive, whatever happened. */
		h = (struct health){.temp_k = 310, .avail_spare = 100, .spare_thresh = 10};
		cw = 0;
	} else {
		/* NVMe Base 2.0 §5.16.1.3 Figure 207 byte 0 (Critical Warning): the
		 * controller sets bit 0 while Available Spare is below its threshold and
		 * bit 1 while the temperature is over WCTEMP (or under an under-temp
		 * threshold, not simulated); bits 2-5 are the test's
		 * (update(critical_warning=) and extra_warning). */
		cw = c->st.critical_warning | h.extra_warning;
		if (h.avail_spare < h.spare_thresh)
			cw |= 0x01;
		if (h.temp_k >= SIM_WCTEMP)
			cw |= 0x02;
	}
	l->critical_warning = cw & 0xff;
	/* bytes 2:1 Composite Temperature, Kelvin, little endian */
	l->temperature[0] = h.temp_k & 0xff;
	l->temperature[1] = (h.temp_k >> 8) & 0xff;
	l->avail_spare = h.avail_spare;         /* byte 3, percent */
	l->spare_thresh = h.spare_thresh;       /* byte 4, percent */
	/* byte 5: may exceed 100, 255 is the cap (Figure 207) */
	l->percent_used = h.percent_used > 255 ? 255 : h.percent_used;
	/* bytes 175:160 and 191:176: 128-bit little-endian counters */
	memcpy(l->media_errors, &h.media_errors, sizeof(h.media_errors));
	memcpy(l->num_err_log_entries, &h.err_log_entries, sizeof(h.err_log_entries));
	/* bytes 195:192, 199:196: minutes over WCTEMP / CCTEMP */
	l->warning_temp_time = h.warning_temp_min;
	l->critical_comp_time = h.critical_temp_min;
}

static int cmd_get_log(struct ctx *c, const struct nvme_passthru_cmd64 *cmd, uint8_t *out)
{
	uint8_t page[4096];
	unsigned lid = cmd->cdw10 & 0xff;
	uint64_t lpo = cmd->cdw12 | (uint64_t)cmd->cdw13 << 32;
	const struct state *s = &c->st;

	memset(page, 0, sizeof(page));
	/* §5.16 Figure "Get Log Page - Command Dword 12/13": the Log Page Offset needs
	 * LPA bit 2 (extended data for Get Log Page); without it the field is reserved
	 * -> Invalid Field in Command. An offset past the page is Invalid Field too. */
	if (lpo && (!(c->cf.lpa & 0x4) || lpo >= sizeof(page) || (lpo & 3)))
		return SC_INVALID_FIELD;
	switch (lid) {
	case NVME_LOG_LID_ERROR:
		break;
	case NVME_LOG_LID_SMART: {
		/* §5.16.1.3: a per-namespace SMART log needs LPA bit 0; otherwise an NSID
		 * other than 0h/FFFFFFFFh is aborted with Invalid Field in Command */
		if (cmd->nsid && cmd->nsid != NS_ALL && !(c->cf.lpa & 0x1))
			return SC_INVALID_FIELD;
		smart_fill(c, (void *)page);
		break;
	}
	case NVME_LOG_LID_FW_SLOT: {
		struct nvme_firmware_slot *l = (void *)page;

		l->afi = 1;
		pad(l->frs[0], c->cf.firmware, sizeof(l->frs[0]));
		break;
	}
	case LOG_EFFECTS: {
		/* §5.16.1.6 Commands Supported and Effects: optional, LPA bit 1 */
		struct nvme_cmd_effects_log *l = (void *)page;
		static const unsigned admin_ops[] = {0x00, 0x01, 0x02, 0x04, 0x05, 0x06,
						     0x08, 0x09, 0x0a, 0x0c};
		unsigned i;

		if (!(c->cf.lpa & 0x2))
			return SC_INVALID_LOG_PAGE;
		for (i = 0; i < sizeof(admin_ops) / sizeof(admin_ops[0]); i++)
			l->acs[admin_ops[i]] = 1;
		if (c->cf.fmt)
			l->acs[nvme_admin_format_nvm] = 1 | 2 | 4;       /* CSUPP LBCC NCC */
		if (c->cf.ns_mgmt)
			l->acs[nvme_admin_ns_mgmt] = l->acs[nvme_admin_ns_attach] = 1 | 4;
		if (sanitize_supported(&c->cf))
			l->acs[nvme_admin_sanitize_nvm] = 1 | 2;
		l->iocs[nvme_cmd_flush] = l->iocs[nvme_cmd_read] = 1;
		l->iocs[nvme_cmd_write] = 1 | 2;
		if (c->cf.wzs)
			l->iocs[nvme_cmd_write_zeroes] = 1 | 2;
		if (c->cf.dsm)
			l->iocs[nvme_cmd_dsm] = 1 | 2;
		if (c->cf.vrfy)
			l->iocs[nvme_cmd_verify] = 1;
		break;
	}
	case NVME_LOG_LID_SANITIZE: {
		struct nvme_sanitize_log_page *l = (void *)page;

		/* Figure "Log Page Identifiers": the Sanitize Status log is mandatory only
		 * with the Sanitize command; otherwise Invalid Log Page (§5.16) */
		if (!sanitize_supported(&c->cf))
			return SC_INVALID_LOG_PAGE;
		uint32_t secs = (uint32_t)((c->cf.sanitize_ms + 999) / 1000);

		l->sprog = sanitizing(s) ? s->sprog : 0xffff;
		l->sstat = (s->sstat & 7) | (s->gde ? 1 << 8 : 0);
		l->scdw10 = s->scdw10;
		l->eto = l->etond = l->etbend = l->etcend = 0xffffffff;
		l->etbe = c->cf.estimates && c->cf.bes ? secs : 0xffffffff;
		l->etce = c->cf.estimates && c->cf.ces ? secs : 0xffffffff;
		break;
	}
	default:
		return SC_INVALID_LOG_PAGE;
	}
	if (out && cmd->data_len) {
		size_t n = lpo < sizeof(page) ? sizeof(page) - lpo : 0;

		n = n < cmd->data_len ? n : cmd->data_len;
		memset(out, 0, cmd->data_len);
		memcpy(out, page + lpo, n);
	}
	return 0;
}

static int cmd_ns_mgmt(struct ctx *c, const struct nvme_passthru_cmd64 *cmd,
		       const uint8_t *buf, uint64_t *result)
{
	struct state *s = &c->st;
	unsigned sel = cmd->cdw10 & 0xf, nsid;
	char path[PATH_MAX];

	if (!c->cf.ns_mgmt)
		return SC_INVALID_OPCODE;
	if (sel == 0) {
		const struct nvme_id_ns *req = (const void *)buf;
		struct ns n;

		if (!buf || cmd->data_len < sizeof(*req))
			return SC_INVALID_FIELD;
		n.nsze = req->nsze;
		n.flbas = req->flbas & 0xf;
		n.attached = 0;
		if (n.flbas >= NLBAF)
			return SC_INVALID_FORMAT;
		if (!req->nsze || req->ncap > req->nsze)
			return SC_INVALID_FIELD;
		if (allocated(s) + ns_bytes(&n) > c->cf.capacity ||
		    ns_bytes(&n) / ns_bs(&n) != n.nsze)
			return SC_NS_INSUFFICIENT_CAP;
		for (nsid = 1; nsid <= c->cf.max_ns && s->ns[nsid].nsze; nsid++)
			;
		if (nsid > c->cf.max_ns)
			return SC_NS_ID_UNAVAILABLE;
		/* on flash a new namespace maps blocks someone freed before */
		backing_path(c, nsid, path, sizeof(path));
		if (free_take(c, path, ns_bytes(&n), c->cf.remap_freed) < 0)
			return -EIO;
		s->ns[nsid] = n;
		*result = nsid;
		namespaces_changed(c);
		return 0;
	}
	if (sel == 1) {
		unsigned lo = cmd->nsid, hi = cmd->nsid;

		if (cmd->nsid == NS_ALL) {
			lo = 1;
			hi = MAX_NS;
		} else if (!ns_valid(c, cmd->nsid) || !s->ns[cmd->nsid].nsze) {
			return SC_INVALID_NS;
		}
		/* highest nsid first: the free media then starts nsid 1, 2, ... */
		for (nsid = hi; nsid >= lo && nsid; nsid--) {
			if (!s->ns[nsid].nsze)
				continue;
			if (free_namespace(c, nsid) < 0) {
				namespaces_changed(c);
				return -EIO;
			}
			memset(&s->ns[nsid], 0, sizeof(s->ns[nsid]));
		}
		namespaces_changed(c);
		return 0;
	}
	return SC_INVALID_FIELD;
}

static int cmd_ns_attach(struct ctx *c, const struct nvme_passthru_cmd64 *cmd, const uint8_t *buf)
{
	const struct nvme_ctrl_list *list = (const void *)buf;
	unsigned sel = cmd->cdw10 & 0xf, i;
	struct ns *n;

	if (!c->cf.ns_mgmt)
		return SC_INVALID_OPCODE;
	if (sel > 1)
		return SC_INVALID_FIELD;
	if (!ns_valid(c, cmd->nsid) || !c->st.ns[cmd->nsid].nsze)
		return SC_INVALID_NS;
	if (!buf || cmd->data_len < sizeof(*list))
		return SC_INVALID_FIELD;
	if (list->num > NVME_ID_CTRL_LIST_MAX)
		return SC_CTRL_LIST_INVALID;
	for (i = 0; i < list->num; i++)
		if (list->identifier[i] != c->cf.cntlid)
			return SC_CTRL_LIST_INVALID;
	if (!list->num)
		return 0;       /* nvme-cli warns that an empty list changes nothing */
	n = &c->st.ns[cmd->nsid];
	if (sel == 0 && n->attached)
		return SC_NS_ALREADY_ATTACHED;
	if (sel == 1 && !n->attached)
		return SC_NS_NOT_ATTACHED;
	n->attached = sel == 0;
	namespaces_changed(c);
	return 0;
}

static int cmd_format(struct ctx *c, const struct nvme_passthru_cmd64 *cmd)
{
	unsigned lbaf = (cmd->cdw10 & 0xf) | ((cmd->cdw10 >> 8) & 0x30), ses = (cmd->cdw10 >> 9) & 7;
	unsigned lo = cmd->nsid, hi = cmd->nsid, nsid;
	int fmt_all, erase_all;
	struct state *s = &c->st;

	/* OACS bit 1: Format NVM is optional -> Invalid Command Opcode without it */
	if (!c->cf.fmt)
		return SC_INVALID_OPCODE;
	if (lbaf >= NLBAF)
		return SC_INVALID_FORMAT;
	/* §5.14 Figure "Format NVM - Command Dword 10": SES 3h..7h reserved; SES 2h
	 * (cryptographic erase) needs FNA bit 2 (CRYES); metadata/PI settings are not
	 * simulated (MS, PI, PIL must be 0) -> Invalid Field in Command */
	if (ses > 2 || (ses == 2 && !(fna(&c->cf) & 0x4)) || (cmd->cdw10 & 0x1f0) ||
	    (cmd->cdw10 & 0xffffc000u))
		return SC_INVALID_FIELD;
	/* FNA bit 3 (FNVMBS, 2.0): NSID FFFFFFFFh not supported for Format NVM ->
	 * Invalid Namespace or Format */
	if (cmd->nsid == NS_ALL && (fna(&c->cf) & 0x8))
		return SC_INVALID_NS;
	if (cmd->nsid != NS_ALL &&
	    (!ns_valid(c, cmd->nsid) || !s->ns[cmd->nsid].nsze || !s->ns[cmd->nsid].attached))
		return SC_INVALID_NS;
	/* §5.14 Figure "Format NVM Operation Scope" and Identify Controller FNA: NSID
	 * FFFFFFFFh or FNA bit 0 (format applies to all namespaces) make the format,
	 * LBA format and secure erase, apply to every namespace; FNA bit 1 widens only
	 * a cryptographic erase (SES 2) to every namespace, the LBA format change stays
	 * with the namespace named */
	fmt_all = cmd->nsid == NS_ALL || (fna(&c->cf) & 0x1);
	erase_all = fmt_all || (ses == 2 && (fna(&c->cf) & 0x2));
	if (fmt_all || erase_all) {
		lo = 1;
		hi = MAX_NS;
	}
	for (nsid = lo; nsid <= hi; nsid++)
		if (s->ns[nsid].nsze && (fmt_all || nsid == cmd->nsid) &&
		    ns_bytes(&s->ns[nsid]) < (1ull << LBADS[lbaf]))
			return SC_INVALID_FORMAT;       /* not one block of the new size */
	if (ses && c->cf.format_ms > 0) {
		/* A secure erase takes the drive's time and Format NVM completes only when
		 * it is done; meanwhile other submitters see Format In Progress (execute()).
		 * The lock is let go for that time, as a controller serves other queues. */
		char name[sizeof(c->cf.name)];

		snprintf(name, sizeof(name), "%s", c->cf.name);
		s->fmt_until = now_ms() + c->cf.format_ms;
		s->fmt_nsid = (fmt_all || erase_all) ? NS_ALL : cmd->nsid;
		state_save(c);
		ctx_close(c);
		usleep((useconds_t)c->cf.format_ms * 1000);
		if (ctx_open(c, name) < 0)
			return -ENODEV;
		s->fmt_until = 0;
		s->fmt_nsid = 0;
	}
	for (nsid = lo; nsid <= hi; nsid++) {
		struct ns *n = &s->ns[nsid];
		uint64_t bytes = ns_bytes(n), kept;

		if (!n->nsze)
			continue;
		if (ses && !c->cf.lie_format && (erase_all || nsid == cmd->nsid))
			fill_ns(c, nsid, ses == 2 ? FILL_RANDOM : FILL_ZERO);
		if (!fmt_all && nsid != cmd->nsid)
			continue;
		n->flbas = lbaf;
		n->nsze = bytes / ns_bs(n);
		kept = ns_bytes(n);
		if (kept < bytes) {
			/* what no longer fills a block of the new size returns to the free media */
			char path[PATH_MAX];
			int fd;

			backing_path(c, nsid, path, sizeof(path));
			fd = open(path, O_RDWR | O_CLOEXEC);
			if (fd >= 0) {
				if (free_prepend(c, fd, kept, bytes - kept) < 0 || ftruncate(fd, kept) < 0)
					fprintf(stderr, "nvme-sim: format: cannot free the tail of %s\n", path);
				close(fd);
			}
		}
	}
	namespaces_changed(c);
	return 0;
}

/* ------------------------------------------------------------ I/O */

/* Dataset Management (NVM Command Set §3.3.3): with AD (cdw11 bit 2) every range is
 * deallocated. What a later read returns is DLFEAT bits 2:0: 001b zeroes (the range
 * becomes a hole), anything else not promised (the old bytes stay, as on a drive
 * that only unmaps). */
static int cmd_dsm(struct ctx *c, const struct nvme_passthru_cmd64 *cmd, const uint8_t *buf,
		   const struct ns *n, const char *path)
{
	unsigned nr = (cmd->cdw10 & 0xff) + 1, i;
	const struct nvme_dsm_range *r = (const void *)buf;

	if (!buf || cmd->data_len < nr * sizeof(*r))
		return SC_INVALID_FIELD;
	for (i = 0; i < nr; i++)
		if (r[i].slba + r[i].nlb > n->nsze)
			return SC_LBA_RANGE;
	if (!(cmd->cdw11 & (1u << 2)))
		return 0;
	c->st.gde = 0;
	if ((c->cf.dlfeat & 7) != 1)
		return 0;
	for (i = 0; i < nr; i++)
		if (r[i].nlb && fill_range(path, r[i].slba * ns_bs(n), (uint64_t)r[i].nlb * ns_bs(n),
					   FILL_ZERO) < 0)
			return -EIO;
	return 0;
}

static int cmd_io(struct ctx *c, const struct nvme_passthru_cmd64 *cmd, uint8_t *buf)
{
	uint64_t slba = cmd->cdw10 | (uint64_t)cmd->cdw11 << 32, nlb = (cmd->cdw12 & 0xffff) + 1;
	char path[PATH_MAX];
	struct ns *n;
	uint64_t off, len;
	int fd, rc = 0;

	/* NVM Command Set: Write Zeroes (ONCS bit 3), Dataset Management (bit 2) and
	 * Verify (bit 7) are optional; an opcode ONCS does not advertise is aborted with
	 * Invalid Command Opcode (Base spec Figure "Generic Command Status Values") */
	if (cmd->opcode != nvme_cmd_flush && cmd->opcode != nvme_cmd_write &&
	    cmd->opcode != nvme_cmd_read && cmd->opcode != nvme_cmd_write_zeroes &&
	    cmd->opcode != nvme_cmd_dsm && cmd->opcode != nvme_cmd_verify)
		return SC_INVALID_OPCODE;
	if ((cmd->opcode == nvme_cmd_write_zeroes && !c->cf.wzs) ||
	    (cmd->opcode == nvme_cmd_dsm && !c->cf.dsm) ||
	    (cmd->opcode == nvme_cmd_verify && !c->cf.vrfy))
		return SC_INVALID_OPCODE;
	if (!ns_valid(c, cmd->nsid) || !c->st.ns[cmd->nsid].nsze || !c->st.ns[cmd->nsid].attached)
		return SC_INVALID_NS;
	if (cmd->opcode == nvme_cmd_flush)
		return 0;
	n = &c->st.ns[cmd->nsid];
	backing_path(c, cmd->nsid, path, sizeof(path));
	if (cmd->opcode == nvme_cmd_dsm)
		return cmd_dsm(c, cmd, buf, n, path);
	if (slba + nlb > n->nsze)
		return SC_LBA_RANGE;
	off = slba * ns_bs(n);
	len = nlb * ns_bs(n);
	/* Base spec "Maximum Data Transfer Size": a transfer beyond 2^MDTS * MPSMIN is
	 * aborted with Invalid Field in Command */
	if ((cmd->opcode == nvme_cmd_read || cmd->opcode == nvme_cmd_write) && c->cf.mdts &&
	    len > ((uint64_t)MPSMIN << c->cf.mdts))
		return SC_INVALID_FIELD;
	if (cmd->opcode == nvme_cmd_verify)
		return 0;       /* reads the range internally; nothing transferred */
	if (cmd->opcode == nvme_cmd_write_zeroes) {
		/* NVM Command Set §3.3.7: more blocks than WZSL allows -> Invalid Field */
		if (c->cf.wzsl && len > ((uint64_t)MPSMIN << c->cf.wzsl))
			return SC_INVALID_FIELD;
		c->st.gde = 0;
		if (c->cf.lie_wz)
			return 0;       /* a lying drive: success, nothing written */
		return fill_range(path, off, len, FILL_ZERO) < 0 ? -EIO : 0;
	}
	if (!buf || cmd->data_len < len)
		return SC_INVALID_FIELD;
	fd = open(path, (cmd->opcode == nvme_cmd_write ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
	if (fd < 0)
		return -EIO;
	if (cmd->opcode == nvme_cmd_write) {
		c->st.gde = 0;
		rc = pwrite(fd, buf, len, off) == (ssize_t)len ? 0 : -EIO;
	} else {
		rc = pread(fd, buf, len, off) == (ssize_t)len ? 0 : -EIO;
	}
	close(fd);
	return rc;
}

/* ------------------------------------------------------------ dispatch */

/* What a sanitize in progress (or a failed one) still lets through. */
static int allowed_while_sanitizing(int admin, unsigned opcode)
{
	return admin && (opcode == nvme_admin_identify || opcode == nvme_admin_get_log_page ||
			 opcode == nvme_admin_get_features || opcode == nvme_admin_abort_cmd ||
			 opcode == nvme_admin_async_event || opcode == nvme_admin_keep_alive);
}

static int injected(struct state *s, int admin, unsigned opcode)
{
	int i;

	for (i = 0; i < s->ninj; i++) {
		struct inj *in = &s->inj[i];

		if (in->opcode != opcode || !strcmp(in->queue, admin ? "io" : "admin"))
			continue;
		if (in->skip > 0) {
			in->skip--;
			return 0;
		}
		if (in->times > 0)
			in->times--;
		{
			int status = in->status;

			if (in->times == 0) {
				memmove(in, in + 1, (s->ninj - i - 1) * sizeof(*in));
				s->ninj--;
			}
			return status;
		}
	}
	return 0;
}

static int execute(struct ctx *c, int admin, struct nvme_passthru_cmd64 *cmd, uint64_t *result)
{
	uint8_t *buf = (uint8_t *)(uintptr_t)cmd->addr;
	struct state *s = &c->st;

	if (sanitizing(s) && !allowed_while_sanitizing(admin, cmd->opcode))
		return SC_SANITIZE_IN_PROGRESS;
	/* A Format NVM in progress (another submitter's): I/O to the namespaces it
	 * formats, and the admin commands that would change or erase them (another
	 * Format NVM, Sanitize, Namespace Management/Attachment), complete with Format
	 * In Progress; Identify and Get Log Page go on. */
	if (s->fmt_until > now_ms() &&
	    (admin ? (cmd->opcode == nvme_admin_format_nvm ||
		      cmd->opcode == nvme_admin_sanitize_nvm ||
		      cmd->opcode == nvme_admin_ns_mgmt || cmd->opcode == nvme_admin_ns_attach)
		   : (s->fmt_nsid == NS_ALL || s->fmt_nsid == cmd->nsid)))
		return SC_FORMAT_IN_PROGRESS;
	if (s->failure[0] && !allowed_while_sanitizing(admin, cmd->opcode) &&
	    !(admin && cmd->opcode == nvme_admin_sanitize_nvm))
		return SC_SANITIZE_FAILED;
	if (!admin)
		return cmd_io(c, cmd, buf);
	if (buf && cmd->data_len && cmd->opcode != nvme_admin_ns_mgmt &&
	    cmd->opcode != nvme_admin_ns_attach)
		memset(buf, 0, cmd->data_len);
	switch (cmd->opcode) {
	case nvme_admin_identify:
		return buf && cmd->data_len >= NVME_IDENTIFY_DATA_SIZE ?
			cmd_identify(c, cmd, buf) : SC_INVALID_FIELD;
	case nvme_admin_get_log_page:
		return cmd_get_log(c, cmd, buf);
	case nvme_admin_get_features:
		return 0;
	case nvme_admin_sanitize_nvm:
		return cmd_sanitize(c, cmd);
	case nvme_admin_ns_mgmt:
		return cmd_ns_mgmt(c, cmd, buf, result);
	case nvme_admin_ns_attach:
		return cmd_ns_attach(c, cmd, buf);
	case nvme_admin_format_nvm:
		return cmd_format(c, cmd);
	default:
		return SC_INVALID_OPCODE;
	}
}

static void log_line(const struct ctx *c, const char *fmt, ...)
{
	char line[768], path[PATH_MAX + 16];
	va_list ap;
	int fd, n;

	n = snprintf(line, sizeof(line), "t=%lld pid=%d ", now_ms(), getpid());
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	snprintf(path, sizeof(path), "%s/commands.log", c->dir);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, line, n) != n)
			fprintf(stderr, "nvme-sim: short write to %s\n", path);
		close(fd);
	}
}

/* ------------------------------------------------------------ fd -> target */

struct target {
	char name[32];          /* controller, e.g. nvme0 */
	unsigned nsid;          /* 0: the controller node */
	unsigned index;
};

static int parse_ctrl_name(const char *s, size_t len, struct target *t)
{
	size_t i;

	if (len < 5 || len >= sizeof(t->name) || strncmp(s, "nvme", 4))
		return -1;
	for (i = 4; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return -1;
	memcpy(t->name, s, len);
	t->name[len] = 0;
	t->index = strtoul(t->name + 4, NULL, 10);
	return 0;
}

static const char *node_name(const struct target *t, char *buf, size_t size)
{
	if (t->nsid)
		snprintf(buf, size, "%sn%u", t->name, t->nsid);
	else
		snprintf(buf, size, "%s", t->name);
	return buf;
}

/* Map a resolved path to a simulated controller node or namespace backing file. */
static int resolve_path(const char *path, struct target *t)
{
	size_t dl = strlen(sim.dev_root), sl = strlen(sim.state);
	char conf[PATH_MAX + 48];

	memset(t, 0, sizeof(*t));
	if (!strncmp(path, sim.dev_root, dl) && path[dl] == '/' &&
	    parse_ctrl_name(path + dl + 1, strlen(path + dl + 1), t) == 0) {
		snprintf(conf, sizeof(conf), "%s/%s/config", sim.state, t->name);
		return exists(conf) ? 0 : -1;
	}
	if (!strncmp(path, sim.state, sl) && path[sl] == '/') {
		const char *rest = path + sl + 1, *slash = strchr(rest, '/');
		char *end;

		if (!slash || parse_ctrl_name(rest, slash - rest, t) < 0 || strncmp(slash, "/ns", 3))
			return -1;
		t->nsid = strtoul(slash + 3, &end, 10);
		if (!t->nsid || t->nsid > MAX_NS || strcmp(end, ".img"))
			return -1;
		return 0;
	}
	return -1;
}

static int resolve_fd(int fd, struct target *t)
{
	char link[64], path[PATH_MAX];
	ssize_t n;

	load_sim();
	if (!sim.active || fd < 0)
		return -1;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return -1;
	path[n] = 0;
	return resolve_path(path, t);
}

/* ------------------------------------------------------------ ioctl */

static const char *ioctl_name(unsigned long req)
{
	switch (req) {
	case NVME_IOCTL_ID: return "id";
	case NVME_IOCTL_RESET: return "reset";
	case NVME_IOCTL_SUBSYS_RESET: return "subsys_reset";
	case NVME_IOCTL_RESCAN: return "rescan";
	case BLKGETSIZE64: return "blkgetsize64";
	case BLKGETSIZE: return "blkgetsize";
	case BLKSSZGET: return "blksszget";
	case BLKPBSZGET: return "blkpbszget";
	case BLKZEROOUT: return "blkzeroout";
	case BLKDISCARD: return "blkdiscard";
	case BLKFLSBUF: return "blkflsbuf";
	case BLKRRPART: return "blkrrpart";
	case BLKROGET: return "blkroget";
	default: return NULL;
	}
}

static int passthru(const struct target *t, unsigned long req, void *arg)
{
	int admin = req == NVME_IOCTL_ADMIN_CMD || req == NVME_IOCTL_ADMIN64_CMD;
	int is64 = req == NVME_IOCTL_ADMIN64_CMD || req == NVME_IOCTL_IO64_CMD;
	struct nvme_passthru_cmd64 cmd;
	uint64_t result = 0;
	int status, inj;
	char node[48];
	struct ctx c;

	if (!arg) {
		errno = EFAULT;
		return -1;
	}
	if (is64) {
		memcpy(&cmd, arg, sizeof(cmd));
	} else {
		const struct nvme_passthru_cmd *c32 = arg;

		memset(&cmd, 0, sizeof(cmd));
		memcpy(&cmd, c32, offsetof(struct nvme_passthru_cmd, timeout_ms));
		cmd.timeout_ms = c32->timeout_ms;
	}
	if (ctx_open(&c, t->name) < 0) {
		errno = ENODEV;
		return -1;
	}
	if (!bound(&c.st)) {
		/* a descriptor opened before the nvme driver let go of the device */
		ctx_close(&c);
		errno = ENODEV;
		return -1;
	}
	ensure_eraser(&c);     /* a sanitize whose eraser died resumes, as after power loss */
	if (!admin && !t->nsid && attached_count(&c.st) != 1) {
		/* the kernel refuses I/O on the controller node unless there is one namespace */
		status = -EINVAL;
		inj = 0;
	} else {
		inj = injected(&c.st, admin, cmd.opcode);
		status = inj ? inj : execute(&c, admin, &cmd, &result);
	}
	state_save(&c);
	log_line(&c, "node=%s queue=%s opcode=0x%02x nsid=0x%x cdw2=0x%x cdw3=0x%x "
		 "cdw10=0x%x cdw11=0x%x cdw12=0x%x cdw13=0x%x cdw14=0x%x cdw15=0x%x "
		 "data_len=%u timeout_ms=%u status=%s0x%x result=0x%llx injected=%d",
		 node_name(t, node, sizeof(node)), admin ? "admin" : "io", cmd.opcode,
		 cmd.nsid, cmd.cdw2, cmd.cdw3, cmd.cdw10, cmd.cdw11, cmd.cdw12, cmd.cdw13,
		 cmd.cdw14, cmd.cdw15, cmd.data_len, cmd.timeout_ms, status < 0 ? "-" : "",
		 status < 0 ? -status : status, (unsigned long long)result, inj != 0);
	ctx_close(&c);
	if (status < 0) {
		errno = -status;
		return -1;
	}
	if (is64)
		((struct nvme_passthru_cmd64 *)arg)->result = result;
	else
		((struct nvme_passthru_cmd *)arg)->result = (uint32_t)result;
	return status;
}

static int other_ioctl(const struct target *t, unsigned long req, void *arg)
{
	const char *name = ioctl_name(req);
	int rc = 0, err = 0;
	char node[48];
	struct ctx c;
	struct ns *n;

	if (ctx_open(&c, t->name) < 0) {
		errno = ENODEV;
		return -1;
	}
	if (!bound(&c.st)) {
		ctx_close(&c);
		errno = ENODEV;
		return -1;
	}
	n = &c.st.ns[t->nsid];
	if (!t->nsid) {
		switch (req) {
		case NVME_IOCTL_RESCAN:
			rescan(&c);
			break;
		case NVME_IOCTL_RESET:
		case NVME_IOCTL_SUBSYS_RESET:
			ensure_eraser(&c);
			break;
		default:
			err = ENOTTY;
		}
	} else if (!n->nsze) {
		err = ENXIO;           /* the namespace was deleted under an open node */
	} else {
		switch (req) {
		case NVME_IOCTL_ID:
			rc = t->nsid;
			break;
		case NVME_IOCTL_RESCAN:
			rescan(&c);
			break;
		case BLKGETSIZE64:
			*(uint64_t *)arg = ns_bytes(n);
			break;
		case BLKGETSIZE:
			*(unsigned long *)arg = ns_bytes(n) / 512;
			break;
		case BLKSSZGET:
		case BLKPBSZGET:
			*(int *)arg = ns_bs(n);
			break;
		case BLKZEROOUT:
		case BLKDISCARD: {
			uint64_t *range = arg;
			char path[PATH_MAX];

			if (range[0] % 512 || range[1] % 512 || range[0] + range[1] > ns_bytes(n)) {
				err = EINVAL;
				break;
			}
			/* the kernel turns BLKZEROOUT into Write Zeroes when the controller has
			 * them (ONCS), and writes zero pages itself when it has not */
			if (req == BLKZEROOUT && c.cf.lie_wz && c.cf.wzs)
				break;
			/* the kernel sends discards as Dataset Management deallocate: without
			 * ONCS bit 2 the queue has no discard support (EOPNOTSUPP); what the
			 * range then reads as is DLFEAT's to say (see cmd_dsm) */
			if (req == BLKDISCARD && !c.cf.dsm) {
				err = EOPNOTSUPP;
				break;
			}
			if (req == BLKDISCARD && (c.cf.dlfeat & 7) != 1)
				break;
			backing_path(&c, t->nsid, path, sizeof(path));
			if (fill_range(path, range[0], range[1], FILL_ZERO) < 0)
				err = EIO;
			break;
		}
		case BLKROGET:
			*(int *)arg = 0;
			break;
		case BLKFLSBUF:
		case BLKRRPART:
			break;
		default:
			err = ENOTTY;
		}
	}
	state_save(&c);
	log_line(&c, "node=%s queue=ioctl name=%s status=%s", node_name(t, node, sizeof(node)), name,
		 err ? strerrorname_np(err) : "0");
	ctx_close(&c);
	if (err) {
		errno = err;
		return -1;
	}
	return rc;
}

#ifndef NVME_SIM_TOOL

int ioctl(int fd, unsigned long req, ...)
{
	struct target t;
	va_list ap;
	void *arg;
	int saved, rc;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	bind_libc();
	/* the lookups below must not leak an errno: nvme-cli reads errno after strtoul */
	saved = errno;
	switch (req) {
	case NVME_IOCTL_ADMIN_CMD:
	case NVME_IOCTL_ADMIN64_CMD:
	case NVME_IOCTL_IO_CMD:
	case NVME_IOCTL_IO64_CMD:
		if (resolve_fd(fd, &t) == 0) {
			rc = passthru(&t, req, arg);
			goto out;
		}
		break;
	default:
		if (ioctl_name(req) && resolve_fd(fd, &t) == 0) {
			rc = other_ioctl(&t, req, arg);
			goto out;
		}
	}
	errno = saved;
	return real_ioctl(fd, req, arg);
out:
	if (rc >= 0)
		errno = saved;
	return rc;
}

/* ------------------------------------------------------------ stat */

/* Give a simulated node the mode and device number the kernel's node would have. */
#define DISGUISE(st, t) do {                                                          \
	if ((t).nsid) {                                                               \
		(st)->st_mode = ((st)->st_mode & ~S_IFMT) | S_IFBLK;                  \
		(st)->st_rdev = makedev(DISK_MAJOR, (t).index * 256 + (t).nsid);      \
	} else {                                                                      \
		(st)->st_mode = ((st)->st_mode & ~S_IFMT) | S_IFCHR;                  \
		(st)->st_rdev = makedev(CTRL_MAJOR, (t).index);                       \
	}                                                                             \
} while (0)

static int candidate(mode_t mode)
{
	load_sim();
	return sim.active && (S_ISREG(mode) || S_ISCHR(mode));
}

static int resolve_name(int dirfd, const char *name, int flags, struct target *t)
{
	char path[PATH_MAX];
	int fd;

	/* callers only get here for a regular file or char device, never a symlink, so
	 * following links resolves the same object even under AT_SYMLINK_NOFOLLOW */
	(void)flags;
	if (name[0] == '/' || dirfd == AT_FDCWD)
		return realpath(name, path) ? resolve_path(path, t) : -1;
	fd = openat(dirfd, name, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return -1;
	{
		int rc = resolve_fd(fd, t);

		close(fd);
		return rc;
	}
}

int fstat(int fd, struct stat *st)
{
	struct target t;
	int rc, saved;

	bind_libc();
	rc = real_fstat(fd, st);
	saved = errno;
	if (rc == 0 && candidate(st->st_mode) && resolve_fd(fd, &t) == 0)
		DISGUISE(st, t);
	errno = saved;
	return rc;
}

int fstat64(int fd, struct stat64 *st)
{
	struct target t;
	int rc, saved;

	bind_libc();
	rc = real_fstat64(fd, st);
	saved = errno;
	if (rc == 0 && candidate(st->st_mode) && resolve_fd(fd, &t) == 0)
		DISGUISE(st, t);
	errno = saved;
	return rc;
}

int stat(const char *path, struct stat *st)
{
	struct target t;
	int rc, saved;

	bind_libc();
	rc = real_stat(path, st);
	saved = errno;
	if (rc == 0 && candidate(st->st_mode) && resolve_name(AT_FDCWD, path, 0, &t) == 0)
		DISGUISE(st, t);
	errno = saved;
	return rc;
}

int stat64(const char *path, struct stat64 *st)
{
	struct target t;
	int rc, saved;

	bind_libc();
	rc = real_stat64(path, st);
	saved = errno;
	if (rc == 0 && candidate(st->st_mode) && resolve_name(AT_FDCWD, path, 0, &t) == 0)
		DISGUISE(st, t);
	errno = saved;
	return rc;
}

int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	struct target t;
	int rc, saved;

	bind_libc();
	rc = real_fstatat(dirfd, path, st, flags);
	saved = errno;
	if (rc == 0 && candidate(st->st_mode) &&
	    ((flags & AT_EMPTY_PATH) && !*path ? resolve_fd(dirfd, &t) :
	     resolve_name(dirfd, path, flags, &t)) == 0)
		DISGUISE(st, t);
	errno = saved;
	return rc;
}

int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	struct target t;
	int rc, saved;

	bind_libc();
	rc = real_fstatat64(dirfd, path, st, flags);
	saved = errno;
	if (rc == 0 && candidate(st->st_mode) &&
	    ((flags & AT_EMPTY_PATH) && !*path ? resolve_fd(dirfd, &t) :
	     resolve_name(dirfd, path, flags, &t)) == 0)
		DISGUISE(st, t);
	errno = saved;
	return rc;
}

int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *st)
{
	struct target t;
	int rc, saved;

	bind_libc();
	if (!real_statx) {
		errno = ENOSYS;
		return -1;
	}
	rc = real_statx(dirfd, path, flags, mask, st);
	saved = errno;
	if (rc == 0 && (st->stx_mask & STATX_TYPE) && candidate(st->stx_mode) &&
	    ((flags & AT_EMPTY_PATH) && !*path ? resolve_fd(dirfd, &t) :
	     resolve_name(dirfd, path, flags, &t)) == 0) {
		st->stx_mode = (st->stx_mode & ~S_IFMT) | (t.nsid ? S_IFBLK : S_IFCHR);
		st->stx_rdev_major = t.nsid ? DISK_MAJOR : CTRL_MAJOR;
		st->stx_rdev_minor = t.nsid ? t.index * 256 + t.nsid : t.index;
	}
	errno = saved;
	return rc;
}

#else  /* NVME_SIM_TOOL: the nvme-sim command */

int main(int argc, char **argv)
{
	struct ctx c;

	if (argc != 3 || (strcmp(argv[1], "rescan") && strcmp(argv[1], "resume"))) {
		fprintf(stderr, "usage: NVME_SIM_STATE=DIR nvme-sim rescan|resume CONTROLLER\n");
		return 2;
	}
	load_sim();
	if (!sim.active) {
		fprintf(stderr, "nvme-sim: NVME_SIM_STATE does not name a simulation\n");
		return 2;
	}
	if (ctx_open(&c, argv[2]) < 0) {
		fprintf(stderr, "nvme-sim: no controller %s in %s\n", argv[2], sim.state);
		return 1;
	}
	if (!strcmp(argv[1], "rescan"))
		rescan(&c);
	else
		ensure_eraser(&c);
	state_save(&c);
	ctx_close(&c);
	return 0;
}

#endif
