"""One module per format, each turning a file into ``documents.extract`` blocks; ``ocr`` reads images for PDF and image pages."""
