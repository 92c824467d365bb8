// Package dirsource is the directory source of the mesh model (a cplink.Source): the
// dataplane file and a directory of resource files, loaded as mesh.Load does, watched with
// inotify (polling as a fallback), decoded in parallel and only when a file changed, with
// the decoded resources kept in a gob cache across restarts.
//
// It never talks to a control plane (package cplink does), allocates VIPs or decides what is
// served: a refused change comes back as an Update carrying the errors.
package dirsource
