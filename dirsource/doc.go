// Package dirsource is the directory source of the mesh model (a cplink.Source): the
// dataplane file and a directory of resource files, loaded as mesh.Load does, watched with
// inotify (polling as a fallback), decoded in parallel and only when a file changed, with
// the decoded resources kept in a gob cache across restarts.
//
// A file refused (it does not decode or validate, cannot be read, is over the size limit or
// not a regular file) holds back nothing but itself: it is served at its last good version,
// or left out when it has none, and named in the Update's Refused beside the model built
// from the other files. What frames the model - the dataplane file, the listing, the total
// size, a problem between files - refuses the load whole: the Update carries the errors and
// no model, and the agent keeps the last good one.
//
// It never talks to a control plane (package cplink does) or allocates VIPs.
package dirsource
