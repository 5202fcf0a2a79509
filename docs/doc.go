// Package docs holds no code: it is the user-facing reference, in
// Markdown. Its test checks that every link into it — from code comments,
// help texts, the README and the pages themselves — names a file and a
// heading that exist, because those anchors are what code refers to.
package docs
