"""NaFlex models (`keras_vit.NaFlexViT`: patches, mask and grid in) exported in every format, with the preprocessing
an app runs beside them (`exporter.plan` and `exporter.write`, reached through `export.export_model`)."""
