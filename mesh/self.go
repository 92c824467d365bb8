package mesh

import (
	"errors"
	"fmt"
)

// SelfDataplane applies Load's rule to the resources of a dataplane file (every source of
// the model applies it): exactly one resource, a Dataplane. err is the file's own error
// (read or decode), listed first.
func SelfDataplane(path string, rs []Resource, err error) (*Dataplane, Errors) {
	errs := AppendErrors(nil, err)
	switch {
	case len(rs) == 1:
		if dp, ok := rs[0].(*Dataplane); ok {
			return dp, errs
		}
		m := rs[0].GetMeta()
		errs = append(errs, &FieldError{Source: m.Source.String(), Kind: rs[0].Kind(), Name: m.Name,
			Msg: "the dataplane file must hold a Dataplane"})
	case len(rs) > 1:
		errs = append(errs, &FieldError{Source: path,
			Msg: fmt.Sprintf("the dataplane file must hold exactly one Dataplane, found %d resources", len(rs))})
	case err == nil:
		errs = append(errs, &FieldError{Source: path, Msg: "no Dataplane in the dataplane file"})
	}
	return nil, errs
}

// AppendErrors appends err to errs as field errors: every one of an Errors, a *FieldError,
// or any other error as one without a field.
func AppendErrors(errs Errors, err error) Errors {
	if err == nil {
		return errs
	}
	var es Errors
	if errors.As(err, &es) {
		return append(errs, es...)
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return append(errs, fe)
	}
	return append(errs, &FieldError{Msg: err.Error()})
}
