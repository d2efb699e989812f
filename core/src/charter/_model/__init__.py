"""The model layer: behaviors, identifiers, I-JSON, errors, contexts and task history."""
