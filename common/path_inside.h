/* common/path_inside.h: is a path one of a directory's own entries?
 *
 * Evaluators and samplers learn checkpoint paths from bus events, and a bus event can name
 * any path; they open only what lies in the run directory they were given. Both sides are
 * resolved (realpath: symbolic links, "..", relative spellings), so "runs/r1/../../etc" or
 * a link pointing out of the directory does not pass. */
#ifndef COMMON_PATH_INSIDE_H
#define COMMON_PATH_INSIDE_H

/* 1 when path exists and is an entry directly inside dir (both resolved), else 0. */
int path_inside(const char *dir, const char *path);
#endif
