// Package deploy holds no code: its tests check the deployment files offline
// (docker-compose.yml, deploy/Dockerfile, the NATS cluster configuration and
// the kustomization in deploy/kubernetes) against the real binaries' flags, the
// roles of internal/auth and the services' durable consumers.
package deploy
