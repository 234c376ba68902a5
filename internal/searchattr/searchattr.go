// Package searchattr names tpdeploy's Temporal search attributes, so the UI's list can
// filter `ClusterName="lab"` or `DeployPhase="serving"`. The server must know them.
package searchattr

import "go.temporal.io/sdk/temporal"

var (
	ClusterName = temporal.NewSearchAttributeKeyKeyword("ClusterName")
	DeployPhase = temporal.NewSearchAttributeKeyKeyword("DeployPhase")
)

// DevServerFlags register them on `temporal server start-dev`; a production cluster needs
// `temporal operator search-attribute create --name ClusterName --type Keyword` (and
// DeployPhase) once.
func DevServerFlags() []string {
	return []string{"--search-attribute", ClusterName.GetName() + "=Keyword",
		"--search-attribute", DeployPhase.GetName() + "=Keyword"}
}
