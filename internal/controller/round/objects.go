package round

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// Objects are svm's own objects a round decides from.
type Objects struct {
	States     []migrationv1alpha1.StorageState
	Migrations []migrationv1alpha1.StorageVersionMigration
}

// ReadObjects lists every StorageState and StorageVersionMigration through
// r, which must read straight from the API server: a round never decides
// from a cache that lags its own last writes (and, say, creates a second
// migration).
func ReadObjects(ctx context.Context, r client.Reader) (Objects, error) {
	var states migrationv1alpha1.StorageStateList
	if err := r.List(ctx, &states); err != nil {
		return Objects{}, fmt.Errorf("list storage states: %w", err)
	}
	var migrations migrationv1alpha1.StorageVersionMigrationList
	if err := r.List(ctx, &migrations); err != nil {
		return Objects{}, fmt.Errorf("list migrations: %w", err)
	}
	return Objects{States: states.Items, Migrations: migrations.Items}, nil
}
